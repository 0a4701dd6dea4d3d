"""device="cuda" with GPU decode (docs/gpu.md). On a machine without a GPU these check that
the GPU path says why it is unavailable and that the options are wired; the GPU checks skip
with a message (bench/gpu/check.sh runs them on a GPU machine)."""
import inspect

import pytest

import stoker_testing  # noqa: F401
import stoker

pytestmark = pytest.mark.skipif(not stoker.extension_available(), reason="engine not built")


def test_gpu_options_are_keywords_with_their_defaults():
    params = inspect.signature(stoker.Pipeline).parameters
    assert params["gpu_decode"].default == "auto"
    assert params["gpu_hybrid_threshold"].default == 1000000
    assert params["device"].default is None  # the binding's torch device, not the row


def test_gpu_path_says_why_it_is_unavailable():
    ok, why = stoker.pipeline.gpu_decode_available()
    if ok:
        pytest.skip("a GPU path is available here; the GPU checks below run")
    # The message names the library that could not be loaded.
    assert "libcuda" in why or "nvJPEG" in why or "CUDA" in why, why


def test_bad_gpu_decode_value_is_rejected_by_the_table(image_folder):
    with pytest.raises(ValueError, match="gpu_decode='sometimes' is not one of"):
        stoker.Pipeline(image_folder, gpu_decode="sometimes")


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: bench/gpu/check.sh runs this on a GPU machine")
    ok, why = stoker.pipeline.gpu_decode_available()
    if not ok:
        pytest.skip(f"GPU decode unavailable: {why}")
    return torch


def test_gpu_decode_matches_cpu_path(image_folder):
    torch = _cuda()
    kw = dict(batch_size=4, image_size=32, seed=3, threads=2, dct_scale=False,
              region_decode=False)
    gpu = stoker.Pipeline(image_folder, device="cuda", gpu_decode="on", **kw)
    cpu = stoker.Pipeline(image_folder, output="torch", **kw)
    n = 0
    for g, c in zip(gpu, cpu):
        assert g["image"].is_cuda
        assert torch.equal(g["index"].cpu(), c["index"])
        assert (g["image"].cpu() - c["image"]).abs().max().item() < 0.05
        n += len(c["label"])
    assert n == 24
    assert gpu.gpu_stats()["images"] == 24
