#!/usr/bin/env python3
"""Pipeline vs peers: runs every contender on the same dataset, side by side, in one run.

Called by bench/pipeline/run.sh (which builds stoker, makes the dataset and the peers'
venv); stdlib only. Contenders, each run --repeats times, interleaved round-robin (rotated each repeat) so that
a busy machine hurts them alike:

  stoker      `stoker bench pipeline --data DIR --batch 64 --threads auto --json F`
              under /usr/bin/time -v (peak RSS), plus the sweep --threads 1,2,3,4
  stoker_base the same command with --stoker-baseline BINARY (e.g. built from main):
              before/after of a change in the same run
  pytorch     torch_loader.py   (.venv: Debian torch + torchvision)
  tv_tensor   tv_tensor_loader.py (.venv: torchvision.io.decode_jpeg + tensor transforms)
  dali        dali_pipeline.py  (.venv-peers)
  tfdata      tfdata_pipeline.py (.venv-peers)
  spdl        spdl_pipeline.py  (.venv-peers: Meta's SPDL, thread-based)
  ffcv        ffcv_loader.py    (.venv-ffcv: FFCV on Debian's torch)
  decode      `stoker bench decode --data DIR --threads N --json F` when the binary has it,
              else decode_limit (TurboJPEG full decode from memory); 1 thread and cores

A contender that is missing or fails is reported as such, with the reason; nothing is
made up. Writes results.json and results.html (self-contained SVG bars) and prints a table
with images/s, CPU-ms per image and the ratios.
"""
import argparse
import datetime
import html
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def log(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def loadavg() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return -1.0


def warm_cache(data: str) -> int:
    n = 0
    for d, _, files in os.walk(data):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                while fh.read(1 << 20):
                    pass
            n += 1
    return n


def find_key(obj, key):
    """First value of `key` anywhere in a JSON tree (stoker's JSON layout may nest)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def parse_time_v(text: str) -> dict:
    out = {}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["peak_rss_bytes"] = int(m.group(1)) * 1024
    m = re.search(r"User time \(seconds\): ([\d.]+)", text)
    s = re.search(r"System time \(seconds\): ([\d.]+)", text)
    if m and s:
        out["process_cpu_s"] = float(m.group(1)) + float(s.group(1))
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if m:
        parts = [float(p) for p in m.group(1).split(":")]
        secs = 0.0
        for p in parts:
            secs = secs * 60 + p
        out["process_wall_s"] = secs
    return out


class Contender:
    """One command line that writes a JSON result; `rate_key` names its images/s."""

    def __init__(self, name, label, group, argv, rate_key="images_per_s", timed_rss=False,
                 env=None):
        self.name, self.label, self.group = name, label, group
        self.argv, self.rate_key, self.timed_rss, self.env = argv, rate_key, timed_rss, env
        self.runs = []      # successful results
        self.errors = []    # failure reasons
        self.missing = None  # reason it could not run at all

    def run(self, tmpdir: str, timeout: float) -> None:
        jpath = os.path.join(tmpdir, f"{self.name}-{len(self.runs) + len(self.errors)}.json")
        argv = [a.replace("{json}", jpath) for a in self.argv]
        tpath = jpath + ".time"
        if self.timed_rss:
            argv = ["/usr/bin/time", "-v", "-o", tpath] + argv
        load = loadavg()
        t0 = time.perf_counter()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                               env=self.env)
        except subprocess.TimeoutExpired:
            self.errors.append(f"timed out after {timeout:.0f} s: {shlex.join(argv)}")
            log(f"{self.name}: TIMEOUT")
            return
        wall = time.perf_counter() - t0
        if p.returncode != 0 or not os.path.exists(jpath):
            tail = (p.stderr or p.stdout or "").strip().splitlines()[-5:]
            self.errors.append(f"exit {p.returncode}: {' | '.join(tail)}")
            log(f"{self.name}: FAILED (exit {p.returncode}) {' | '.join(tail)}")
            return
        with open(jpath) as f:
            res = json.load(f)
        rate = find_key(res, self.rate_key)
        if not isinstance(rate, (int, float)) or rate <= 0:
            self.errors.append(f"no positive '{self.rate_key}' in its JSON")
            log(f"{self.name}: FAILED (no {self.rate_key} in JSON)")
            return
        rec = {"images_per_s": float(rate), "loadavg_before": load, "command_wall_s": wall,
               "raw": res}
        cpu_ms = find_key(res, "cpu_ms_per_image")
        if isinstance(cpu_ms, (int, float)) and cpu_ms > 0:
            rec["cpu_ms_per_image"] = float(cpu_ms)
        if self.timed_rss and os.path.exists(tpath):
            rec.update(parse_time_v(open(tpath).read()))
            if "cpu_ms_per_image" not in rec:
                # Whole-process CPU (start-up and warm-up included) per image processed.
                n = find_key(res, "samples") or find_key(res, "images")
                if isinstance(n, (int, float)) and n > 0 and "process_cpu_s" in rec:
                    rec["cpu_ms_per_image"] = 1000.0 * rec["process_cpu_s"] / n
                    rec["cpu_ms_per_image_scope"] = "whole process (incl. start-up, warm-up)"
        self.runs.append(rec)
        extra = f", {rec['cpu_ms_per_image']:.2f} CPU-ms/image" if "cpu_ms_per_image" in rec else ""
        rss = f", peak RSS {rec['peak_rss_bytes'] / 2**20:.0f} MiB" if "peak_rss_bytes" in rec else ""
        log(f"{self.name}: {rate:.1f} images/s{extra}{rss} (load {load:.1f})")

    def summary(self) -> dict:
        out = {"name": self.name, "label": self.label, "group": self.group,
               "command": shlex.join(self.argv).replace("{json}", "FILE")}
        if self.missing:
            out["status"] = "missing"
            out["reason"] = self.missing
            return out
        if not self.runs:
            out["status"] = "failed"
            out["reason"] = "; ".join(self.errors) or "did not run"
            return out
        rates = [r["images_per_s"] for r in self.runs]
        out.update({"status": "ok", "images_per_s": statistics.median(rates),
                    "images_per_s_min": min(rates), "images_per_s_max": max(rates),
                    "repeats": len(rates), "failed_repeats": len(self.errors)})
        cpus = [r["cpu_ms_per_image"] for r in self.runs if "cpu_ms_per_image" in r]
        if cpus:
            out["cpu_ms_per_image"] = statistics.median(cpus)
            scope = self.runs[0].get("cpu_ms_per_image_scope")
            if scope:
                out["cpu_ms_per_image_scope"] = scope
        rss = [r["peak_rss_bytes"] for r in self.runs if "peak_rss_bytes" in r]
        if rss:
            out["peak_rss_bytes"] = max(rss)
        budget = [find_key(r["raw"], "memory_budget_bytes") or find_key(r["raw"], "memory_budget")
                  for r in self.runs]
        budget = [b for b in budget if isinstance(b, (int, float)) and b > 0]
        if budget:
            out["memory_budget_bytes"] = max(budget)
        stages = find_key(self.runs[-1]["raw"], "stages")
        if isinstance(stages, list) and stages:
            out["stages"] = stages
        for k in ("bottleneck", "threads", "prefetch", "consumer_wait_frac", "autotune", "tuning", "version", "what", "output",
                  "pin_memory_effective", "scale", "tool"):
            v = find_key(self.runs[-1]["raw"], k)
            if v is not None and (k == "tuning" or not isinstance(v, (dict, list))):
                out[k] = v
        out["loadavg_before"] = [r["loadavg_before"] for r in self.runs]
        out["runs"] = [{k: v for k, v in r.items() if k != "raw"} for r in self.runs]
        out["last_raw"] = self.runs[-1]["raw"]
        if self.errors:
            out["errors"] = self.errors
        return out


def has_subcommand(stoker: str, *words) -> bool:
    if not stoker or not os.access(stoker, os.X_OK):
        return False
    try:
        p = subprocess.run([stoker, *words, "--help"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    # CLI11 answers an unknown subcommand's --help with the parent's help and exit 0:
    # the Usage line must name the subcommand itself.
    usage = next((l for l in p.stdout.splitlines() if l.startswith("Usage:")), "")
    return p.returncode == 0 and (" " + " ".join(words) + " ") in (usage + " ")


def python_has(py: str, module: str) -> str:
    """'' when `py` can import `module`, else the reason."""
    if not os.access(py, os.X_OK):
        return f"{py} not found (run bench/pipeline/install-peers.sh)"
    p = subprocess.run([py, "-c", f"import {module}"], capture_output=True, text=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if p.returncode != 0:
        return f"{py} cannot import {module}: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    return ""


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def svg_bars(title, rows, unit, fmt="{:.0f}", lower_is_better=False, width=860):
    """rows: (label, value or None, lo, hi, note, colour). Horizontal bars, whiskers lo..hi."""
    bar_h, gap, left, right, top = 22, 8, 300, 130, 34
    h = top + len(rows) * (bar_h + gap) + 24
    vmax = max([r[3] or r[1] or 0 for r in rows] + [1e-9]) * 1.05
    plot_w = width - left - right
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'font-family="sans-serif" font-size="13">',
           f'<text x="8" y="20" font-weight="bold">{html.escape(title)}'
           f'{" (lower is better)" if lower_is_better else " (higher is better)"}</text>']
    for i, (label, v, lo, hi, note, colour) in enumerate(rows):
        y = top + i * (bar_h + gap)
        out.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7}" text-anchor="end">'
                   f'{html.escape(label)}</text>')
        if v is None:
            out.append(f'<text x="{left + 4}" y="{y + bar_h * 0.7}" fill="#a00">'
                       f'{html.escape(note)}</text>')
            continue
        w = plot_w * v / vmax
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                   f'fill="{colour}"><title>{html.escape(label)}: {fmt.format(v)} {unit}'
                   f'</title></rect>')
        if lo is not None and hi is not None and hi > lo:
            x0, x1 = left + plot_w * lo / vmax, left + plot_w * hi / vmax
            ym = y + bar_h / 2
            out.append(f'<line x1="{x0:.1f}" y1="{ym}" x2="{x1:.1f}" y2="{ym}" '
                       f'stroke="#222" stroke-width="1.5"/>')
            for x in (x0, x1):
                out.append(f'<line x1="{x:.1f}" y1="{ym - 5}" x2="{x:.1f}" y2="{ym + 5}" '
                           f'stroke="#222" stroke-width="1.5"/>')
        xt = left + max(w, plot_w * (hi or 0) / vmax) + 6
        out.append(f'<text x="{xt:.1f}" y="{y + bar_h * 0.7}">{fmt.format(v)} {unit}'
                   f'{(" " + html.escape(note)) if note else ""}</text>')
    out.append("</svg>")
    return "\n".join(out)


COLOURS = {"stoker": "#d9480f", "sweep": "#f08c00", "peer": "#1c7ed6", "limit": "#5c940d"}


def write_html(path, results):
    rows, crow = [], []
    for c in results["contenders"]:
        col = COLOURS.get(c["group"], "#868e96")
        if c["status"] == "ok":
            rows.append((c["label"], c["images_per_s"], c["images_per_s_min"],
                         c["images_per_s_max"], "", col))
            if "cpu_ms_per_image" in c:
                crow.append((c["label"], c["cpu_ms_per_image"], None, None,
                             "*" if c.get("cpu_ms_per_image_scope") else "", col))
        else:
            rows.append((c["label"], None, None, None, f'{c["status"]}: {c["reason"][:64]}', col))
    ratio_rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{'n/a' if v is None else f'{v:.2f}x'}</td>"
        f"<td>{html.escape(results['targets'].get(k, ''))}</td></tr>"
        for k, v in results["ratios"].items())
    m = results["machine"]
    body = f"""<!doctype html><html><head><meta charset="utf-8">
<title>stoker pipeline vs peers</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:20px auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}
code{{background:#f3f3f3;padding:1px 3px}}</style></head><body>
<h1>stoker pipeline vs peers</h1>
<p>{html.escape(results['dataset']['description'])}. Machine: {m['cpus']} cores
({html.escape(m['cpu_model'])}), {html.escape(m['when'])}, git {html.escape(m['git'])}.
Median of {results['settings']['repeats']} interleaved repeats; whiskers: min..max.
Load average before the runs: {html.escape(results['loadavg_summary'])}.</p>
{svg_bars("Throughput, images/s", rows, "img/s")}
{svg_bars("CPU cost, CPU-ms per image", crow, "ms", fmt="{:.2f}", lower_is_better=True)
 if crow else ""}
<p>* whole-process CPU including start-up and warm-up.</p>
<h2>Ratios</h2><table><tr><th>ratio</th><th>value</th><th>target</th></tr>{ratio_rows}</table>
<p>Command: <code>{html.escape(results['command'])}</code></p>
</body></html>
"""
    with open(path, "w") as f:
        f.write(body)


def main() -> int:
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description="stoker pipeline vs peers, side by side")
    ap.add_argument("--data", required=True)
    ap.add_argument("--stoker", default="", help="stoker binary ('' = skip stoker)")
    ap.add_argument("--decode-limit", default="", help="decode_limit binary (fallback)")
    ap.add_argument("--torch-python", default=os.path.join(ROOT, ".venv/bin/python"))
    ap.add_argument("--peers-python", default=os.path.join(ROOT, ".venv-peers/bin/python"))
    ap.add_argument("--ffcv-python", default=os.path.join(ROOT, ".venv-ffcv/bin/python"))
    ap.add_argument("--stoker-baseline", default="",
                    help="a second stoker binary (e.g. built from main) run the same way")
    ap.add_argument("--baseline-label", default="stoker baseline (--threads auto)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=cores, help="peers' workers/threads")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=8, help="peers: warm-up batches")
    ap.add_argument("--batches", type=int, default=64, help="peers: timed batches")
    ap.add_argument("--decode-seconds", type=float, default=5.0)
    ap.add_argument("--sweep", default="1,2,3,4", help="stoker fixed --threads values")
    ap.add_argument("--stoker-epochs", type=int, default=3,
                    help="stoker: epochs per run (its figure includes start-up and "
                         "autotuning: nothing is excluded, so it errs against stoker)")
    ap.add_argument("--stoker-args", default="",
                    help="extra arguments for `stoker bench pipeline`")
    ap.add_argument("--only", default="", help="comma list of contender names to run")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=HERE, help="folder for results.json / results.html")
    ap.add_argument("--dataset-note", default="")
    ap.add_argument("--command", default="", help="the command line to record (run.sh's)")
    args = ap.parse_args()

    files = sum(len([f for f in fs if f.lower().endswith((".jpg", ".jpeg"))])
                for _, _, fs in os.walk(args.data))
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.data)
                 for f in fs)
    if files == 0:
        log(f"no JPEG files under {args.data}")
        return 2

    contenders = []
    common = ["--data", args.data, "--batch", str(args.batch), "--threads", str(args.threads),
              "--warmup", str(args.warmup), "--batches", str(args.batches), "--json", "{json}"]
    sargs = ["--epochs", str(args.stoker_epochs), "--quiet", *shlex.split(args.stoker_args)]

    has_pipeline = has_subcommand(args.stoker, "bench", "pipeline")
    st = Contender("stoker", "stoker (--threads auto)", "stoker",
                   [args.stoker, "bench", "pipeline", "--data", args.data, "--batch",
                    str(args.batch), "--threads", "auto", "--json", "{json}", *sargs],
                   rate_key="samples_per_s", timed_rss=True)
    if not args.stoker:
        st.missing = "stoker binary did not build (see build-bench.ninja.log)"
    elif not has_pipeline:
        st.missing = f"`{args.stoker} bench pipeline` not available in this build"
    contenders.append(st)
    if args.stoker_baseline:
        base = Contender("stoker_base", args.baseline_label, "stoker",
                         [args.stoker_baseline, *st.argv[1:]], rate_key="samples_per_s",
                         timed_rss=True)
        if not has_subcommand(args.stoker_baseline, "bench", "pipeline"):
            base.missing = f"`{args.stoker_baseline} bench pipeline` not available"
        contenders.append(base)
    for t in [int(x) for x in args.sweep.split(",") if x.strip()]:
        c = Contender(f"stoker_t{t}", f"stoker (--threads {t})", "sweep",
                      [args.stoker, "bench", "pipeline", "--data", args.data, "--batch",
                       str(args.batch), "--threads", str(t), "--json", "{json}", *sargs],
                      rate_key="samples_per_s", timed_rss=True)
        c.missing = st.missing
        contenders.append(c)

    peer_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for name, label, py, mod, script in [
            ("pytorch", "PyTorch DataLoader", args.torch_python, "torchvision", "torch_loader.py"),
            ("tv_tensor", "torchvision tensor path (decode_jpeg)", args.torch_python,
             "torchvision", "tv_tensor_loader.py"),
            ("dali", "DALI (CPU)", args.peers_python, "nvidia.dali", "dali_pipeline.py"),
            ("tfdata", "tf.data", args.peers_python, "tensorflow", "tfdata_pipeline.py"),
            ("spdl", "SPDL (threads)", args.peers_python, "spdl.io", "spdl_pipeline.py"),
            ("ffcv", "FFCV", args.ffcv_python, "ffcv", "ffcv_loader.py")]:
        c = Contender(name, label, "peer", [py, os.path.join(HERE, script), *common],
                      env=peer_env)
        c.missing = python_has(py, mod) or None
        contenders.append(c)

    use_stoker_decode = has_subcommand(args.stoker, "bench", "decode")
    for t in sorted({1, cores}):
        if use_stoker_decode:
            argv = [args.stoker, "bench", "decode", "--data", args.data, "--threads", str(t),
                    "--json", "{json}"]
            tool = "stoker bench decode"
        else:
            argv = [args.decode_limit, "--data", args.data, "--threads", str(t), "--seconds",
                    str(args.decode_seconds), "--json", "{json}"]
            tool = "decode_limit.c"
        c = Contender(f"decode_t{t}", f"decode limit ({t} thr, {tool})", "limit", argv)
        if not use_stoker_decode and not os.access(args.decode_limit or "/nonexistent", os.X_OK):
            c.missing = "neither `stoker bench decode` nor the decode_limit binary is available"
        contenders.append(c)
    # 1/2-scale DCT decode: what a crop-aware decoder can gain (info only).
    c = Contender("decode_half", f"decode 1/2 DCT ({cores} thr, decode_limit.c)", "limit",
                  [args.decode_limit, "--data", args.data, "--threads", str(cores),
                   "--seconds", str(args.decode_seconds), "--scale", "2", "--json", "{json}"])
    if not os.access(args.decode_limit or "/nonexistent", os.X_OK):
        c.missing = "decode_limit binary not built"
    contenders.append(c)

    if args.only:
        keep = set(args.only.split(","))
        contenders = [c for c in contenders if c.name in keep]

    for c in contenders:
        if c.missing:
            log(f"{c.name}: MISSING: {c.missing}")
    log(f"{files} images, {nbytes / 2**20:.1f} MiB; warming the page cache")
    warm_cache(args.data)
    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
        for r in range(args.repeats):
            log(f"repeat {r + 1}/{args.repeats}")
            warm_cache(args.data)
            # Rotate the order each repeat: no contender always runs first (right after
            # the previous round's peers exit) or last.
            k = r % len(contenders)
            for c in contenders[k:] + contenders[:k]:
                if not c.missing:
                    c.run(tmp, args.timeout)

    summ = {c.name: c.summary() for c in contenders}

    def rate(name):
        s = summ.get(name)
        return s["images_per_s"] if s and s["status"] == "ok" else None

    def cpu(name):
        s = summ.get(name)
        return s.get("cpu_ms_per_image") if s and s["status"] == "ok" else None

    limit_name = f"decode_t{cores}"
    ratios = {
        "stoker / PyTorch": ratio(rate("stoker"), rate("pytorch")),
        f"stoker / decode limit ({cores} threads)": ratio(rate("stoker"), rate(limit_name)),
        "stoker / DALI": ratio(rate("stoker"), rate("dali")),
        "stoker / tf.data": ratio(rate("stoker"), rate("tfdata")),
        "stoker / SPDL": ratio(rate("stoker"), rate("spdl")),
        "stoker / torchvision tensor path": ratio(rate("stoker"), rate("tv_tensor")),
        "stoker / FFCV": ratio(rate("stoker"), rate("ffcv")),
        "stoker / stoker baseline": ratio(rate("stoker"), rate("stoker_base")),
        "DALI / PyTorch": ratio(rate("dali"), rate("pytorch")),
        "tf.data / PyTorch": ratio(rate("tfdata"), rate("pytorch")),
        "PyTorch CPU-ms / stoker CPU-ms": ratio(cpu("pytorch"), cpu("stoker")),
    }
    targets = {"stoker / PyTorch": ">= 5x",
               f"stoker / decode limit ({cores} threads)": ">= 0.85x",
               "stoker / DALI": "> 1x", "stoker / tf.data": "> 1x"}
    sweep = {c.name: rate(c.name) for c in contenders if c.group == "sweep"}
    sweep_ok = {k: v for k, v in sweep.items() if v}
    autotune = {"auto": rate("stoker"), "fixed": sweep}
    if sweep_ok and rate("stoker"):
        best = max(sweep_ok, key=sweep_ok.get)
        autotune.update({"best_fixed": best, "best_fixed_images_per_s": sweep_ok[best],
                         "auto_over_best": rate("stoker") / sweep_ok[best],
                         "target": "auto within 10% of the best fixed (>= 0.90)"})
        autotune["pass"] = autotune["auto_over_best"] >= 0.90
        ratios["stoker auto / best fixed threads"] = autotune["auto_over_best"]
        targets["stoker auto / best fixed threads"] = ">= 0.90x"
    memory = {}
    if summ.get("stoker", {}).get("status") == "ok":
        s = summ["stoker"]
        memory = {"peak_rss_bytes": s.get("peak_rss_bytes"),
                  "memory_budget_bytes": s.get("memory_budget_bytes")}
        if memory["peak_rss_bytes"] and memory["memory_budget_bytes"]:
            memory["rss_over_budget"] = memory["peak_rss_bytes"] / memory["memory_budget_bytes"]

    cpu_model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    loads = [l for c in contenders for l in summ[c.name].get("loadavg_before", [])]
    results = {
        "command": args.command or shlex.join(sys.argv),
        "driver_argv": sys.argv,
        "dataset": {"path": args.data, "images": files, "bytes": nbytes,
                    "mean_kib": nbytes / files / 1024,
                    "description": f"{files} JPEGs, {nbytes / files / 1024:.0f} KiB mean"
                                   f"{', ' + args.dataset_note if args.dataset_note else ''}, "
                                   "page cache warm, batch "
                                   f"{args.batch}, RandomResizedCrop(224)+flip+normalize"},
        "settings": {"batch": args.batch, "peer_threads": args.threads,
                     "repeats": args.repeats, "peer_warmup_batches": args.warmup,
                     "peer_timed_batches": args.batches, "decode_seconds": args.decode_seconds,
                     "stoker_args": args.stoker_args, "stoker_epochs": args.stoker_epochs},
        "machine": {"cpus": cores, "cpu_model": cpu_model, "kernel": platform.release(),
                    "when": datetime.datetime.now(datetime.timezone.utc)
                    .strftime("%Y-%m-%d %H:%M UTC"), "git": git},
        "loadavg_summary": (f"min {min(loads):.1f}, median {statistics.median(loads):.1f}, "
                            f"max {max(loads):.1f}") if loads else "n/a",
        "contenders": [summ[c.name] for c in contenders],
        "ratios": ratios, "targets": targets, "autotune": autotune, "memory": memory,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    write_html(os.path.join(args.out, "results.html"), results)

    # The table.
    print()
    print(f"Pipeline vs peers: {results['dataset']['description']}")
    print(f"{cores} cores, load average before runs: {results['loadavg_summary']}")
    print(f"{'contender':44s} {'images/s':>10s} {'min..max':>15s} {'CPU-ms/img':>11s}")
    for c in results["contenders"]:
        if c["status"] != "ok":
            print(f"{c['label']:44s} {c['status'].upper():>10s}  {c['reason'][:80]}")
            continue
        cm = f"{c['cpu_ms_per_image']:.2f}" if "cpu_ms_per_image" in c else "-"
        if c.get("cpu_ms_per_image_scope"):
            cm += "*"
        mm = f"{c['images_per_s_min']:.0f}..{c['images_per_s_max']:.0f}"
        print(f"{c['label']:44s} {c['images_per_s']:10.1f} {mm:>15s} {cm:>11s}")
    print()
    for k, v in ratios.items():
        t = targets.get(k, "")
        print(f"  {k:44s} {'n/a' if v is None else f'{v:.2f}x':>8s}  {('target ' + t) if t else ''}")
    if memory:
        pr, mb = memory.get("peak_rss_bytes"), memory.get("memory_budget_bytes")
        print(f"  stoker peak RSS {pr / 2**20:.0f} MiB" if pr else "  stoker peak RSS n/a",
              f"vs memory budget {mb / 2**20:.0f} MiB" if mb else "(no memory_budget in JSON)")
    for name in ["stoker"] + [c.name for c in contenders if c.group == "sweep"]:
        s = summ.get(name)
        if not s or s["status"] != "ok":
            continue
        print(f"  {s['label']}: bottleneck {s.get('bottleneck', '?')}, threads "
              f"{s.get('threads', '?')}, prefetch {s.get('prefetch', '?')}, consumer wait "
              f"{100 * (s.get('consumer_wait_frac') or 0):.0f}%")
        for stg in s.get("stages", []):
            n = stg.get("items") or 0
            cpu_ms = 1000.0 * stg.get("cpu_s", 0) / n if n else 0
            print(f"      {stg.get('name', '?'):10s} threads {stg.get('threads', '?')}, busy "
                  f"{100 * (stg.get('busy_frac') or 0):3.0f}%, wait-in "
                  f"{100 * (stg.get('wait_input_frac') or 0):3.0f}%, wait-out "
                  f"{100 * (stg.get('wait_output_frac') or 0):3.0f}%, "
                  f"{cpu_ms:.2f} CPU-ms/item")
    print(f"\nwrote {os.path.join(args.out, 'results.json')} and results.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
