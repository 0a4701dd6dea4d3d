"""One options table for the CLI, Python and the docs; one stats codec for the CLI and Python.

The table lives in src/pipeline/options_schema.cc (bound as _stoker.option_schema()).
These tests fail when the Python surface drifts from it."""
import inspect
import json
import os
import pathlib
import subprocess

import pytest

import stoker_testing  # noqa: F401
import stoker

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not stoker.extension_available(), reason="engine not built")
SMALL = dict(image_size=32, val_resize=36, threads=2)


def schema():
    return [r for r in stoker.pipeline.option_schema() if r["name"] not in ("data", "device")]


def test_signature_is_the_table():
    params = inspect.signature(stoker.Pipeline).parameters
    names = list(params)
    binding = list(stoker.pipeline._BINDING_ARGS)
    assert names == ["source", *binding, *[r["name"] for r in schema()]]
    for r in schema():
        assert params[r["name"]].default == r["default"], r["name"]
        assert params[r["name"]].kind is inspect.Parameter.KEYWORD_ONLY
    # The defaults a PyTorch user knows.
    assert params["mean"].default == stoker.pipeline.IMAGENET_MEAN
    assert params["std"].default == stoker.pipeline.IMAGENET_STD
    assert params["batch_size"].default == 256 and params["decode"].default == "train"


def test_docstring_and_docs_page_cover_every_option():
    doc = stoker.Pipeline.__doc__
    page = (ROOT / "docs" / "options.md").read_text()
    for r in schema():
        assert f"    {r['name']}={r['default']!r}" in doc, r["name"]
        assert f"| `{r['name']}` | `" in page, r["name"]
        assert r["cli"] in page, r["cli"]
        for a in r["aliases"]:
            assert a in doc and a in page
    for name in stoker.pipeline._BINDING_ARGS:
        assert f"    {name}=" in doc


def test_every_option_is_accepted_with_its_default(image_folder):
    kw = {r["name"]: r["default"] for r in schema()}
    kw.update(batch_size=4, image_size=32, val_resize=36)
    p = stoker.Pipeline(image_folder, **kw)
    assert sum(len(b["label"]) for b in p) == 24
    # And the resolved options read back under the same names.
    assert set(p._p.options) == {r["name"] for r in stoker.pipeline.option_schema()}
    assert p._p.options["mean"] == pytest.approx(stoker.pipeline.IMAGENET_MEAN)


def test_unknown_keywords_are_type_errors_with_a_hint(image_folder):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'batchsize' "
                                        r"\(did you mean 'batch_size'\?\)"):
        stoker.Pipeline(image_folder, batchsize=4)
    # The CLI's old spelling is not a Python keyword.
    with pytest.raises(TypeError, match="'mode'"):
        stoker.Pipeline(image_folder, mode="val")


def test_values_are_checked_by_the_table(image_folder):
    cases = [
        (dict(memory_budget="lots"), "memory_budget must be 'auto', a byte count"),
        (dict(flip_prob=2), r"flip_prob must be in \[0.0, 1.0\], got 2"),
        (dict(image_size=4), r"image_size must be in \[8, 8192\], got 4"),
        (dict(shuffle="yes"), "shuffle must be True or False, got 'yes'"),
        (dict(ratio=(2, 1)), r"ratio must be \(min, max\)"),
        (dict(mean=("a", "b", "c")), r"mean must be 3 numbers, got \('a', 'b', 'c'\)"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            stoker.Pipeline(image_folder, **kw)
    # Sizes with units, 0 and None as auto.
    p = stoker.Pipeline(image_folder, memory_budget="300MB", threads=0, prefetch=None, **{
        k: v for k, v in SMALL.items() if k != "threads"})
    assert p.stats()["memory_budget_bytes"] == 300_000_000
    assert p._p.options["threads"] == "auto" and p._p.options["prefetch"] == "auto"


def _binary():
    b = os.environ.get("STOKER_BINARY") or str(ROOT / "build" / "stoker")
    if not os.path.exists(b):
        pytest.skip(f"stoker binary not built at {b}")
    return b


def test_cli_flags_are_the_table():
    exe = _binary()
    help_text = subprocess.run([exe, "bench", "pipeline", "--help"], capture_output=True,
                               text=True, check=True).stdout
    for r in stoker.pipeline.option_schema():
        assert r["cli"] in help_text, r["cli"]
        if r["type"] == "bool":
            assert "--no-" + r["cli"][2:] in help_text
        for a in r["aliases"]:
            assert a in help_text
    table = json.loads(subprocess.run([exe, "options", "--json"], capture_output=True, text=True,
                                      check=True).stdout)
    assert [t["name"] for t in table] == [r["name"] for r in stoker.pipeline.option_schema()]
    md = subprocess.run([exe, "options", "--markdown"], capture_output=True, text=True,
                        check=True).stdout
    assert md == (ROOT / "docs" / "options.md").read_text()


def test_stats_have_the_cli_json_keys(image_folder, tmp_path):
    """Python's stats() and `bench pipeline --json` come from one codec: same keys."""
    exe = _binary()
    out = tmp_path / "m.json"
    subprocess.run([exe, "bench", "pipeline", "--data", image_folder, "--batch-size", "4",
                    "--image-size", "32", "--decode", "val", "--val-resize", "36", "--quiet",
                    "--json", str(out)], check=True)
    cli = json.loads(out.read_text())
    p = stoker.Pipeline(image_folder, batch_size=4, decode="val", **SMALL)
    for _ in p:
        pass
    py = p.stats()
    run_keys = {"data", "epochs", "batch_size", "peak_rss_bytes"}
    assert set(py) == set(cli) - run_keys
    assert set(py["stages"][0]) == set(cli["stages"][0])
    assert py["samples"] == cli["samples"] == 24
    assert py["rank"] == 0 and py["world_size"] == 1 and py["rank_source"]
    assert py["cpu_budget"] >= 1 and py["budget_source"]
