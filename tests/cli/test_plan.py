"""`stoker plan` and `stoker plan measure` through the CLI."""
import json


def test_plan_json_html_and_named_storage(stoker, tmp_path):
    out, html = tmp_path / "p.json", tmp_path / "p.html"
    p = stoker("plan", "--gpus", 16, "--gpu-samples-per-s", 1000, "--batch", 50,
               "--dataset-samples", 1000000, "--sample-kb", 100, "--cpu-ms", 2,
               "--storage", "s3", "--json", out, "--html", html)
    assert "bottleneck: request rate" in p.stdout
    j = json.loads(out.read_text())
    # 2 nodes x 8 GPUs x 1000 samples/s, one GET per sample: 16,000/s against 5,500.
    assert j["needs"]["storage_req_s_total"] == 16000
    assert j["inputs"]["storage"]["aggregate_req_s"] == 5500
    assert j["needs"]["cores_per_gpu_analytic"] == 2
    assert "<svg" in html.read_text()
    # Four prefixes serve 22,000/s: no longer the limit.
    j4 = json.loads(stoker("plan", "--gpus", 16, "--gpu-samples-per-s", 1000, "--batch", 50,
                           "--dataset-samples", 1000000, "--sample-kb", 100, "--cpu-ms", 2,
                           "--storage", "s3", "--prefixes", 4, "--json", "-", "--quiet").stdout)
    assert j4["bottleneck"] != "request rate"


def test_plan_from_measured_inputs(stoker, images, tmp_path):
    bench = tmp_path / "b.json"
    stoker("bench", "pipeline", "--data", images, "--batch", 16, "--threads", 1, "--json", bench,
           "--quiet")
    p = stoker("plan", "--gpus", 8, "--gpu-samples-per-s", 100, "--batch", 16,
               "--dataset-samples", 96000, "--from-bench", bench, "--json", "-", "--quiet")
    j = json.loads(p.stdout)
    assert j["inputs"]["cpu_ms_per_sample"] > 0 and j["inputs"]["sample_bytes"] > 0


def test_plan_bad_input_exits_2(stoker):
    base = ["plan", "--gpu-samples-per-s", 100, "--dataset-samples", 1000, "--sample-kb", 10,
            "--cpu-ms", 1]
    for extra, msg in ((["--gpus", 12], "whole number of nodes"),
                       (["--gpus", 8, "--storage", "floppy"], "unknown storage profile"),
                       (["--gpus", 8, "--latency-ms", 5, "--latency-p99-ms", 1], "below the mean"),
                       (["--gpus", 8, "--batch", 256], "more samples than the dataset"),
                       (["--gpus", 8, "--from-bench", "/nonexistent.json"], "cannot read"),
                       (["--gpus", 8, "--shard-mb", 10], "--shard-mb given with --format files")):
        p = stoker(*base, *extra, check=False)
        assert p.returncode == 2, (extra, p.stdout, p.stderr)
        assert msg in p.stderr, (extra, p.stderr)


def test_plan_malformed_measurement_files_exit_2(stoker, tmp_path):
    bad = tmp_path / "bad.json"
    base = ["plan", "--gpus", 8, "--gpu-samples-per-s", 100, "--dataset-samples", 1000,
            "--sample-kb", 10]
    for text in ('{"stages": [1, {"cpu_s": "x"}], "samples": "10"}', "[1, 2]", "{not json",
                 '{"stages": "no", "samples": 3}'):
        bad.write_text(text)
        p = stoker(*base, "--from-bench", bad, check=False)
        assert p.returncode == 2 and "stoker:" in p.stderr, (text, p.stderr)
    for text in ('{"points": [7, {"pattern": 3, "block": "x"}]}', '{"points": []}'):
        bad.write_text(text)
        p = stoker(*base, "--cpu-ms", 1, "--from-io", bad, check=False)
        assert p.returncode == 2 and "stoker:" in p.stderr, (text, p.stderr)


def test_plan_measure_slows_storage_and_emulates_the_step(stoker, images, tmp_path):
    out = tmp_path / "m.json"
    stoker("plan", "measure", "--data", images, "--threads", 2, "--fused", "--batch", 16,
           "--read-latency-ms", 2, "--step-ms", 5, "--json", out, "--quiet")
    m = json.loads(out.read_text())
    assert m["samples"] == 96 - 2 * 16  # two warm-up batches excluded
    assert m["reads_per_sample"] >= 1   # every read went through the slowed Env
    # Two threads, each at least 2 ms per sample of sleep: at most 1000 samples/s.
    assert 0 < m["samples_per_s"] <= 1000
    assert 0 < m["gpu_util"] <= 1
