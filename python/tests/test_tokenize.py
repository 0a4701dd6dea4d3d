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
from stoker_testing import need_server

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


def read_corpus(out_dir):
    m = json.load(open(os.path.join(out_dir, "stoker-token-manifest.json")))
    got = []
    for s in m["shards"]:
        store = stoker.TokenStore(str(os.path.join(out_dir, s["outputs"][0]))[:-4])
        got += [store[i].tolist() for i in range(len(store))]
    return m, got


def test_a_large_file_is_split_into_pieces_tokenized_in_parallel(tmp_path, tokenizer_json):
    """One big JSONL: cut at line boundaries into pieces of ~`split` bytes, tokenized by two
    processes; the documents come out exactly once each, in the file's order."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    eos = tok.token_to_id("<|endoftext|>")
    texts = sentences(7, 600)
    write_jsonl(tmp_path / "big.jsonl", texts)
    size = (tmp_path / "big.jsonl").stat().st_size
    out = tmp_path / "o" / "c"
    r = cli("convert", f"text:{tmp_path}/big.jsonl?split=8k",
            f"tokens:{out}?tokenizer={tokenizer_json}", "--threads", "2")
    m, got = read_corpus(tmp_path / "o")
    assert len(m["shards"]) == -(-size // 8192) >= 4, (size, len(m["shards"]))
    ranges = [s["piece"]["bytes"] for s in m["shards"]]
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no gap
    expect = [tok.encode(t, add_special_tokens=False).ids + [eos] for t in texts]
    assert got == expect  # every document once, in order, none cut at a piece boundary
    assert f"{len(texts)} documents" in r.stdout
    assert cli("verify", str(tmp_path / "o")).returncode == 0
    # The same corpus unsplit: the same token stream and the same totals.
    cli("convert", f"text:{tmp_path}/big.jsonl?split=0",
             f"tokens:{tmp_path / 'one' / 'c'}?tokenizer={tokenizer_json}")
    m1, got1 = read_corpus(tmp_path / "one")
    assert len(m1["shards"]) == 1 and got1 == got and m1["tokens"] == m["tokens"]


def test_an_error_in_a_later_piece_names_the_byte_offset(tmp_path, tokenizer_json):
    texts = sentences(8, 300)
    write_jsonl(tmp_path / "big.jsonl", texts)
    data = (tmp_path / "big.jsonl").read_bytes()
    bad_at = data.index(b"\n", len(data) * 3 // 4) + 1  # a line start in the last quarter
    data = data[:bad_at] + b"{not json\n" + data[bad_at:]
    (tmp_path / "big.jsonl").write_bytes(data)
    r = cli("convert", f"text:{tmp_path}/big.jsonl?split=4k",
            f"tokens:{tmp_path / 'o' / 'c'}?tokenizer={tokenizer_json}", check=False)
    assert r.returncode != 0
    assert f"big.jsonl: the line at byte {bad_at}: not a JSON object" in r.stderr, r.stderr
    r = cli("convert", f"text:{tmp_path}/big.jsonl?split=4k&on_error=skip",
            f"tokens:{tmp_path / 'k' / 'c'}?tokenizer={tokenizer_json}")
    assert f"{len(texts)} documents" in r.stdout and "1 skipped" in r.stdout, r.stdout


def test_parquet_row_groups_are_pieces(tmp_path, tokenizer_json):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    eos = tok.token_to_id("<|endoftext|>")
    texts = sentences(9, 400)
    pq.write_table(pa.table({"text": texts}), tmp_path / "t.parquet", row_group_size=50)
    r = cli("convert", f"text:{tmp_path}/t.parquet?split=1k",
            f"tokens:{tmp_path / 'o' / 'c'}?tokenizer={tokenizer_json}")
    m, got = read_corpus(tmp_path / "o")
    assert len(m["shards"]) > 1 and all("row_groups" in s["piece"] for s in m["shards"])
    assert got == [tok.encode(t, add_special_tokens=False).ids + [eos] for t in texts]
    assert "400 documents" in r.stdout


S3_VARS = ["STOKER_TEST_S3_ENDPOINT", "STOKER_TEST_S3_KEY", "STOKER_TEST_S3_SECRET",
           "STOKER_TEST_S3_BUCKET"]


def test_text_from_s3_tokenizes_as_the_local_files(tmp_path, tokenizer_json, monkeypatch):
    need_server(S3_VARS, "S3 test server (scripts/servers/s3.sh)")
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    e = os.environ
    client = boto3.client("s3", endpoint_url=e["STOKER_TEST_S3_ENDPOINT"],
                          aws_access_key_id=e["STOKER_TEST_S3_KEY"],
                          aws_secret_access_key=e["STOKER_TEST_S3_SECRET"], region_name="us-east-1",
                          config=Config(request_checksum_calculation="when_required",
                                        response_checksum_validation="when_required"))
    prefix = f"tok-{os.getpid()}-{tmp_path.name}"
    for name, seed, n in [("a.jsonl", 11, 150), ("b.jsonl", 12, 90)]:
        write_jsonl(tmp_path / name, sentences(seed, n))
        client.upload_file(str(tmp_path / name), e["STOKER_TEST_S3_BUCKET"], f"{prefix}/{name}")
    client.put_object(Bucket=e["STOKER_TEST_S3_BUCKET"], Key=f"{prefix}/notes.txt", Body=b"x")
    for k, v in {"AWS_ACCESS_KEY_ID": e["STOKER_TEST_S3_KEY"],
                 "AWS_SECRET_ACCESS_KEY": e["STOKER_TEST_S3_SECRET"], "AWS_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": e["STOKER_TEST_S3_ENDPOINT"],
                 "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    url = f"s3://{e['STOKER_TEST_S3_BUCKET']}/{prefix}/*.jsonl"
    cli("convert", f"text:{url}?split=4k", f"tokens:{tmp_path / 'r' / 'c'}?tokenizer={tokenizer_json}")
    cli("convert", f"text:{tmp_path}/*.jsonl?split=4k",
        f"tokens:{tmp_path / 'l' / 'c'}?tokenizer={tokenizer_json}")
    mr, remote = read_corpus(tmp_path / "r")
    ml, local = read_corpus(tmp_path / "l")
    assert remote == local and len(remote) == 240 and mr["checksum"] == ml["checksum"]
    assert mr["inputs"] == [url.replace("*.jsonl", n) for n in ("a.jsonl", "b.jsonl")]
    assert len(mr["shards"]) > 2  # the objects were split into ranged pieces too
    bad = cli("convert", f"text:s3://{e['STOKER_TEST_S3_BUCKET']}/{prefix}/none*.jsonl",
              f"tokens:{tmp_path / 'n' / 'c'}?tokenizer={tokenizer_json}", check=False)
    assert bad.returncode != 0 and "no file matches" in bad.stderr, bad.stderr
