"""The doctor on a language model's trace, recorded here with PyTorch's profiler: a tiny
GPT-style model (token embedding + position embedding + a layer + LM head) trained on
packed token batches. record_shapes=True puts the token ids' [batch, sequence] shape in
aten::embedding's "Input Dims", from which the doctor reports tokens/s; a loader that is
made slow on purpose must be named as the cause with the token-loading fixes."""
import os
import time

import pytest

torch = pytest.importorskip("torch")
from stoker_testing import doctor_report  # noqa: E402

B, S, V, H = 4, 64, 512, 32


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(V, H)
        self.pos = torch.nn.Embedding(S, H)
        self.mix = torch.nn.Linear(H, H)
        self.head = torch.nn.Linear(H, V)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos)
        return self.head(torch.relu(self.mix(x)))


class Tokens(torch.utils.data.Dataset):
    """Packed windows of S + 1 tokens from one long stream; `delay_s` per sample emulates a
    loader that cannot keep up (tokenizing on the fly, a cold index)."""

    def __init__(self, delay_s):
        g = torch.Generator().manual_seed(0)
        self.stream = torch.randint(0, V, (64 * (S + 1),), generator=g)
        self.delay_s = delay_s

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.delay_s:
            time.sleep(self.delay_s)
        w = self.stream[i * (S + 1):(i + 1) * (S + 1)]
        return w[:-1], w[1:]


def record(path, delay_s, steps=6):
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Tokens(delay_s), batch_size=B, num_workers=0)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=steps - 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for i, (ids, labels) in enumerate(loader):
            if i == steps:
                break
            logits = model(ids)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()


def doctor(path, tmp_path):
    with open(path) as fh:
        if '"Input Dims"' not in fh.read():
            # Debian's torch 1.13 has no Kineto: its legacy profiler exports no shapes, so
            # the trace cannot say how many tokens a step reads. Runs where Kineto is
            # (PyTorch's wheels; bench/gpu/check.sh); src/doctor/doctor_test.cc covers the
            # rule on a Kineto-format trace.
            pytest.skip("this PyTorch's profiler writes no \"Input Dims\" (no Kineto)")
    return doctor_report(path, tmp_path)


def finding(rep, fid):
    got = [f for f in rep["findings"] if f["id"] == fid]
    return got[0] if got else None


def test_doctor_reports_tokens_per_second_and_names_a_slow_token_loader(tmp_path):
    slow = str(tmp_path / "slow.json")
    record(slow, delay_s=0.02)  # 4 samples x 20 ms = 80 ms of loading per step
    rep = doctor(slow, tmp_path)
    f = finding(rep, "input.tokens")
    assert f is not None, [x["id"] for x in rep["findings"]]
    assert f["severity"] == "high", f
    assert f"reads {B * S} token ids per step" in f["evidence"], f["evidence"]
    # tokens/s = B * S / the step time the doctor measured
    step_s = rep["step_s"] if "step_s" in rep else rep["summary"]["step_s"]
    want = B * S / step_s
    got = float(f["title"].split(": ")[1].split(" tokens/s")[0])
    assert abs(got - want) <= 0.01 * want + 1, (got, want)
    assert "TokenPipeline" in f["fix"] and "non_blocking" in f["fix"]
    assert rep["verdict"] == "input_bound", rep["verdict"]


def test_doctor_on_a_fed_language_model_only_informs(tmp_path):
    fast = str(tmp_path / "fast.json")
    record(fast, delay_s=0)
    rep = doctor(fast, tmp_path)
    f = finding(rep, "input.tokens")
    assert f is not None
    assert f["severity"] in ("info", "medium"), f  # the in-process loader costs a little
    assert f"reads {B * S} token ids per step" in f["evidence"]
