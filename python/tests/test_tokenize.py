"""`stoker convert text:... tokens:...` with a real Hugging Face tokenizer (a byte-level BPE
trained here with `tokenizers` on text written in this test), through the CLI binary:
token counts and ids against the tokenizer itself, EOS per document, the manifest,
`stoker verify`, restart after a failure, and invalid UTF-8 as an error or a counted skip."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stoker_testing  # noqa: F401

stoker = pytest.importorskip("stoker")
tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.skipif(not stoker.extension_available(), reason="no compiled engine")

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly pack their "
         "boxes of liquor and the river runs past old mills toward the grey sea").split()


def sentences(seed, n):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(3, 40))
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), k)]
        out.append(" ".join(words).capitalize() + ". Ünïcødé ✓ " + str(int(rng.integers(1e6))))
    return out


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sentences(0, 2000), trainer=trainer)
    path = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    tok.save(path)
    return path


def cli(*args, check=True):
    binary = os.environ.get("STOKER_BINARY") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build", "stoker")
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    r = subprocess.run([binary, *args], capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"stoker {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")


def test_convert_text_to_megatron_tokens_and_verify(tmp_path, tokenizer_json):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    eos = tok.token_to_id("<|endoftext|>")
    a, b = sentences(1, 120), sentences(2, 80)
    write_jsonl(tmp_path / "a.jsonl", a)
    write_jsonl(tmp_path / "b.jsonl", b)
    out = tmp_path / "out" / "corpus"
    r = cli("convert", f"text:{tmp_path}/*.jsonl", f"tokens:{out}?tokenizer={tokenizer_json}")
    assert "200 documents" in r.stdout, r.stdout
    m = json.load(open(tmp_path / "out" / "stoker-token-manifest.json"))
    assert m["complete"] and len(m["shards"]) == 2
    expect = [tok.encode(t, add_special_tokens=False).ids + [eos] for t in a + b]
    assert m["tokens"] == sum(len(e) for e in expect)
    got = []
    for s in m["shards"]:
        store = stoker.TokenStore(str(tmp_path / "out" / s["outputs"][0])[:-4])
        assert store.dtype == "uint16"  # vocab < 65500: Megatron's rule
        got += [store[i].tolist() for i in range(len(store))]
    assert got == expect
    assert tok.decode(got[0][:-1]) == a[0]
    ok = cli("verify", str(tmp_path / "out"))
    assert ok.stdout.startswith("ok: 200 documents"), ok.stdout
    # A damaged shard: verify names it and fails.
    binp = tmp_path / "out" / m["shards"][1]["outputs"][0]
    data = bytearray(binp.read_bytes())
    data[10] ^= 0xFF
    binp.write_bytes(bytes(data))
    bad = cli("verify", str(tmp_path / "out"), check=False)
    assert bad.returncode == 1 and "corpus-00001" in bad.stderr, bad.stderr
    # A second run of a complete conversion does nothing.
    again = cli("convert", f"text:{tmp_path}/*.jsonl", f"tokens:{out}?tokenizer={tokenizer_json}")
    assert "already complete" in again.stdout


def test_invalid_utf8_fails_then_resume_continues(tmp_path, tokenizer_json):
    src = tmp_path / "src"
    src.mkdir()
    write_jsonl(src / "p0.jsonl", sentences(3, 50))
    with open(src / "p1.jsonl", "wb") as f:
        f.write(b'{"text": "fine"}\n{"text": "bad \xff\xfe bytes"}\n')
    write_jsonl(src / "p2.jsonl", sentences(4, 30))
    out = tmp_path / "o" / "c"
    spec = f"tokens:{out}?tokenizer={tokenizer_json}"
    r = cli("convert", f"text:{src}/*.jsonl", spec, "--threads", "1", check=False)
    assert r.returncode != 0
    assert "p1.jsonl: line 2: invalid UTF-8" in r.stderr, r.stderr
    m = json.load(open(tmp_path / "o" / "stoker-token-manifest.json"))
    assert not m["complete"]
    done = {s["index"] for s in m["shards"]}
    assert 0 in done and 1 not in done
    first = tmp_path / "o" / m["shards"][0]["outputs"][0]
    mtime = first.stat().st_mtime_ns
    # Without --resume the unfinished manifest is not overwritten.
    assert cli("convert", f"text:{src}/*.jsonl", spec, check=False).returncode == 2
    write_jsonl(src / "p1.jsonl", ["fine", "now good"])
    r = cli("convert", f"text:{src}/*.jsonl", spec, "--resume")
    assert "82 documents" in r.stdout, r.stdout
    assert first.stat().st_mtime_ns == mtime  # the finished shard was not redone
    assert cli("verify", f"tokens:{out}").returncode == 0


def test_skip_mode_counts_and_plain_text(tmp_path, tokenizer_json):
    src = tmp_path / "s"
    src.mkdir()
    with open(src / "x.txt", "wb") as f:
        f.write("one line\n".encode() + b"broken \xc3\x28 line\n" + "last line\n".encode())
    out = tmp_path / "o" / "t"
    r = cli("convert", f"text:{src}/x.txt?per=line&on_error=skip",
            f"tokens:{out}?tokenizer={tokenizer_json}&format=nanogpt")
    assert "2 documents" in r.stdout and "1 skipped" in r.stdout, r.stdout
    m = json.load(open(tmp_path / "o" / "stoker-token-manifest.json"))
    s = stoker.TokenStore(f"nanogpt:{tmp_path / 'o' / m['shards'][0]['outputs'][0]}"
                          f"?eos={m['options']['eos']}")
    assert len(s) == 2
