"""The `stoker bench pipeline` and `stoker demo` contract, end to end through the CLI."""
import json
import os


def test_json_has_the_stable_fields(stoker, images, tmp_path):
    out = tmp_path / "m.json"
    p = stoker("bench", "pipeline", "--data", images, "--batch", 16, "--json", out)
    assert "samples/s" in p.stdout and "bottleneck" in p.stdout
    m = json.loads(out.read_text())
    assert m["samples"] == 96
    assert m["samples_per_s"] > 0
    names = [s["name"] for s in m["stages"]]
    assert names == ["read", "decode", "augment", "batch"]
    for s in m["stages"]:
        for k in ("items", "busy_frac", "wait_input_frac", "wait_output_frac"):
            assert k in s
        assert 0 <= s["busy_frac"] <= 1.0001
    assert m["stages"][1]["items"] == 96
    assert m["bottleneck"] in names + ["consumer"]
    assert m["threads"] >= 1


def test_keys_out_is_deterministic_and_complete(stoker, images, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    stoker("bench", "pipeline", "--data", images, "--batch", 10, "--threads", 1,
           "--seed", 5, "--keys-out", a, "--quiet")
    stoker("bench", "pipeline", "--data", images, "--batch", 10, "--threads", 3,
           "--seed", 5, "--keys-out", b, "--quiet")
    stoker("bench", "pipeline", "--data", images, "--batch", 10, "--seed", 6,
           "--keys-out", c, "--quiet")
    ka, kb, kc = (x.read_text().split() for x in (a, b, c))
    assert ka == kb
    assert len(ka) == 96 and len(set(ka)) == 96
    assert kc != ka and sorted(kc) == sorted(ka)


def test_ranks_from_environment_are_disjoint(stoker, images, tmp_path):
    keys, counts = [], []
    for r in range(3):
        f = tmp_path / f"k{r}"
        stoker("bench", "pipeline", "--data", images, "--batch", 8, "--balance", "drop",
               "--keys-out", f, "--quiet", env={"RANK": str(r), "WORLD_SIZE": "3"})
        k = f.read_text().split()
        keys += k
        counts.append(len(k))
    assert len(set(keys)) == len(keys) == 96
    assert counts == [32, 32, 32]


def test_bad_input_exit_codes(stoker, images, tmp_path):
    p = stoker("bench", "pipeline", "--data", tmp_path / "nope", check=False)
    assert p.returncode == 2 and "nope" in p.stderr
    p = stoker("bench", "pipeline", "--data", images, "--threads", "many", check=False)
    assert p.returncode == 2 and "threads" in p.stderr
    bad = tmp_path / "bad" / "c0"
    bad.mkdir(parents=True)
    (bad / "x.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    first_class = sorted(d for d in images.iterdir() if d.is_dir())[0]
    for src in sorted(first_class.glob("*.jpg"))[:3]:
        (bad / src.name).write_bytes(src.read_bytes())
    p = stoker("bench", "pipeline", "--data", bad.parent, "--batch", 2, check=False)
    assert p.returncode == 1 and "x.jpg" in p.stderr
    out = tmp_path / "skip.json"
    p = stoker("bench", "pipeline", "--data", bad.parent, "--batch", 2, "--on-error", "skip",
               "--json", out)
    m = json.loads(out.read_text())
    assert m["skipped"] == 1 and "x.jpg" in m["skipped_items"][0]
    assert "skipped 1 bad samples" in p.stdout


def test_demo_runs_and_compares(stoker, tmp_path):
    p = stoker("demo", "--dir", tmp_path / "demo", "--count", 64, "--batch", 16,
               "--step-ms", 5, "--epochs", 1)
    assert "speedup" in p.stdout and "GPU waiting" in p.stdout
    assert "generated now" in p.stdout
    try:
        import torch, torchvision  # noqa: F401,E401
        have_torch = True
    except ImportError:
        have_torch = False
    if have_torch:  # the DataLoader under stoker watch: the doctor's report, then both runs
        assert "PyTorch DataLoader, num_workers=2" in p.stdout
        assert "stoker doctor" in p.stdout and "verdict on the DataLoader run" in p.stdout
        assert (tmp_path / "demo.run" / "watch.json").exists()
    else:
        assert "PyTorch half skipped" in p.stdout and "naive" in p.stdout
    assert "stoker: threads auto, prefetch auto" in p.stdout
    # A second run uses the cached dataset; without PyTorch on the Python side it falls back.
    p2 = stoker("demo", "--dir", tmp_path / "demo", "--count", 64, "--batch", 16,
                "--step-ms", 5, "--epochs", 1, env={"STOKER_PYTHON": "/nonexistent/python"})
    assert "PyTorch half skipped" in p2.stdout and "naive: 1 thread" in p2.stdout
    assert "speedup" in p2.stdout
    assert "64 synthetic JPEGs, cached)" in p2.stdout
