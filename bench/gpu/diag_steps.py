"""The options of test_gpu_decode_matches_cpu_path on its odd-sized JPEGs, outside pytest, with a
line per batch, to locate a crash without a debugger (bench/gpu/diag.sh runs it). Prints to
stderr, unbuffered."""
import os, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "tests"))
import torch, stoker

def say(*a):
    print(*a, file=sys.stderr, flush=True)

kw = dict(batch_size=4, image_size=32, seed=3, threads=2, dct_scale=False, region_decode=False)
torch.zeros(1, device="cuda")
import stoker_testing
odd = stoker_testing.write_image_folder(tempfile.mkdtemp())  # sizes 48..63 x 40..55: not MCU multiples
for name, k in (("odd sizes, gpu_decode off", dict(kw, gpu_decode="off")),
                ("odd sizes, gpu_decode on, threads 1", dict(kw, gpu_decode="on", threads=1)),
                ("odd sizes, gpu_decode on", dict(kw, gpu_decode="on"))):
    say("==", name)
    p = stoker.Pipeline(odd, device="cuda", **k)
    for i, b in enumerate(p):
        torch.cuda.synchronize()
        say(" batch", i, tuple(b["image"].shape), "index", b["index"].tolist())
    say(" done", p.gpu_stats())
    del p, b
