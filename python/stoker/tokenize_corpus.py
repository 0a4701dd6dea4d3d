"""Tokenize text into a token store, once: `stoker convert text:SRC tokens:DST`.

    stoker convert 'text:data/*.jsonl?key=text' 'tokens:out/web?tokenizer=tokenizer.json'
    python -m stoker tokenize 'text:data/*.jsonl' 'tokens:out/web?tokenizer=tokenizer.json'

SRC: ``text:`` then files (a '*' glob or a comma list; local paths or s3:// / gs:// object
URLs, listed and read through pyarrow's file systems with the same AWS_* variables as the
C++ side) of JSONL (one JSON object per line, the text under ``key``, default ``text``;
.jsonl.gz too), Parquet (the ``key`` column) or plain text (.txt: one document per file, or
per line with ``per=line``). Options after '?': key=, per=line, on_error=skip (invalid UTF-8
or a bad JSON line is skipped and counted instead of failing), split=SIZE (default 256m;
0: never).

A file larger than ``split`` is cut into pieces of about that size, tokenized in parallel
like separate files: uncompressed JSONL and per-line text at line boundaries (a line
belongs to the piece its first byte falls in), Parquet by row groups; gzip and
one-document-per-file text are one piece. Pieces follow each other in the output in file
order, so the documents come out in the same order as without splitting.

DST: ``tokens:`` then an output prefix; options: tokenizer=PATH (a Hugging Face
tokenizer.json, required), eos=ID (default: the tokenizer's <|endoftext|>, </s>, <eos> or
<|end_of_text|>), format=megatron|nanogpt|llmc (default megatron), dtype= (default:
Megatron's rule, uint16 below 65500 ids, else int32).

One output shard per piece (PREFIX-00000_text_document.bin/.idx for Megatron), written
under a temporary name and renamed when complete; files are tokenized in parallel, one
process per core, streaming (batches of documents, never a whole file in memory). The
manifest DST_DIR/stoker-token-manifest.json records every finished shard with its document
and token counts and checksum, so an interrupted run continues with ``--resume`` after the
last complete shards (the same rule as `stoker convert`), and `stoker verify DST_DIR`
recomputes them. EOS is appended to every document.
"""

import fnmatch
import glob
import gzip
import hashlib
import io
import json
import multiprocessing as mp
import os
import sys
import time

from ._errors import CorruptDataError, InvalidArgumentError, NotFoundError, require_extension

MANIFEST = "stoker-token-manifest.json"
_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")


def _parse(spec, prefix):
    if not spec.startswith(prefix):
        raise InvalidArgumentError(f"'{spec}' does not start with '{prefix}'")
    rest = spec[len(prefix):]
    opts = {}
    if "?" in rest:
        rest, q = rest.split("?", 1)
        for kv in filter(None, q.split("&")):
            if "=" not in kv:
                raise InvalidArgumentError(f"option '{kv}' in '{spec}' needs =")
            k, v = kv.split("=", 1)
            opts[k] = v
    return rest, opts


def _parse_size(text):
    """'256m', '1g', '64k', '1000' -> bytes (binary units, as the CLI's sizes)."""
    t = text.strip().lower().rstrip("b").rstrip("i")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(t[-1:], 1)
    try:
        v = float(t[:-1] if mult > 1 else t)
    except ValueError:
        raise InvalidArgumentError(f"split={text}: not a size (e.g. 256m, 1g, 0)") from None
    if v < 0:
        raise InvalidArgumentError(f"split={text}: must be >= 0")
    return int(v * mult)


def _is_remote(path):
    return path.startswith(("s3://", "gs://"))


_FS = {}


def _remote_fs(url):
    """(pyarrow FileSystem, path) for an s3:// or gs:// URL, configured from the environment
    as the C++ object store is (docs/remote-storage.md): AWS_ENDPOINT_URL[_S3] (path-style),
    AWS_REGION / AWS_DEFAULT_REGION, AWS_NO_SIGN_REQUEST, the SDK's credential chain;
    STORAGE_EMULATOR_HOST for gs://."""
    import pyarrow.fs as pafs

    scheme = url[:2]
    if scheme not in _FS:
        if scheme == "s3":
            kw = {}
            ep = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if ep:
                sch, _, host = ep.partition("://")
                kw["endpoint_override"], kw["scheme"] = (host or sch).rstrip("/"), (sch if host else "https")
                kw["force_virtual_addressing"] = os.environ.get("STOKER_S3_ADDRESSING") == "virtual"
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region or ep:
                kw["region"] = region or "us-east-1"
            if os.environ.get("AWS_NO_SIGN_REQUEST") in ("1", "true", "TRUE", "yes"):
                kw["anonymous"] = True
            _FS[scheme] = pafs.S3FileSystem(**kw)
        else:
            emu = os.environ.get("STORAGE_EMULATOR_HOST")
            if emu:
                sch, _, host = emu.partition("://")
                _FS[scheme] = pafs.GcsFileSystem(anonymous=True, scheme=sch if host else "http",
                                                 endpoint_override=host or sch)
            else:
                _FS[scheme] = pafs.GcsFileSystem()
    return _FS[scheme], url[5:]


def _expand(pattern):
    out = []
    for part in filter(None, pattern.split(",")):
        wild = any(c in part for c in "*?[")
        if _is_remote(part):
            import pyarrow.fs as pafs

            fs, path = _remote_fs(part)
            if wild:
                head = path[:min(path.find(c) for c in "*?[" if c in path)]
                base = head.rsplit("/", 1)[0]
                infos = fs.get_file_info(pafs.FileSelector(base, recursive="**" in path))
                hits = sorted(part[:5] + i.path for i in infos
                              if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.path, path))
            else:
                if fs.get_file_info(path).type != pafs.FileType.File:
                    raise NotFoundError(f"{part}: no such object")
                hits = [part]
        else:
            hits = sorted(glob.glob(part)) if wild else [part]
            for p in hits:
                if not os.path.isfile(p):
                    raise NotFoundError(f"{p}: no such file")
        if not hits:
            raise NotFoundError(f"no file matches {part}")
        out += hits
    return out


class _RawRemote(io.RawIOBase):
    """A pyarrow input file as a raw stream (buffered by io.BufferedReader)."""

    def __init__(self, f):
        self.f = f

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, b):
        data = self.f.read(len(b))
        b[:len(data)] = data
        return len(data)

    def seek(self, off, whence=0):
        return self.f.seek(off, whence)

    def tell(self):
        return self.f.tell()

    def close(self):
        self.f.close()
        super().close()


def _open(path):
    """A binary, seekable, buffered reader of a local file or an object."""
    if _is_remote(path):
        fs, p = _remote_fs(path)
        return io.BufferedReader(_RawRemote(fs.open_input_file(p)), buffer_size=1 << 20)
    return open(path, "rb", buffering=1 << 20)


def _size(path):
    if _is_remote(path):
        fs, p = _remote_fs(path)
        return fs.get_file_info(p).size
    return os.path.getsize(path)


def _parquet(path):
    import pyarrow.parquet as pq

    if _is_remote(path):
        fs, p = _remote_fs(path)
        return pq.ParquetFile(fs.open_input_file(p))
    return pq.ParquetFile(path)


def _pieces(path, split, per_line):
    """The pieces of one input: [(begin, end)] byte ranges (lines) or row-group lists
    (Parquet); [None] when the file is read whole."""
    if path.endswith(".parquet"):
        md = _parquet(path).metadata
        groups, cur, cur_bytes = [], [], 0
        for g in range(md.num_row_groups):
            cur.append(g)
            cur_bytes += md.row_group(g).total_byte_size
            if split and cur_bytes >= split:
                groups.append(cur)
                cur, cur_bytes = [], 0
        if cur:
            groups.append(cur)
        return [("rg", g) for g in groups] if len(groups) > 1 else [None]
    is_json = ".jsonl" in path or ".json" in path or ".ndjson" in path
    if path.endswith(".gz") or not (is_json or per_line) or not split:
        return [None]
    size = _size(path)
    if size <= split:
        return [None]
    n = -(-size // split)
    step = -(-size // n)
    return [("bytes", (k * step, min(size, (k + 1) * step))) for k in range(n)]


def _lines(f, piece):
    """(byte offset, line) of the lines whose first byte lies in the piece's range."""
    if piece is None:
        pos = 0
        for line in f:
            yield pos, line
            pos += len(line)
        return
    begin, end = piece[1]
    pos = begin
    if begin > 0:
        f.seek(begin - 1)
        if f.read(1) != b"\n":  # begin is inside a line: it belongs to the previous piece
            pos = begin + len(f.readline())
    while pos < end:
        line = f.readline()
        if not line:
            return
        yield pos, line
        pos += len(line)


def _documents(path, key, per_line, skip, counts, piece=None):
    """Yields the documents of one input file (or of one piece of it, see _pieces) as str;
    invalid UTF-8 or JSON raises CorruptDataError naming the file and document (line number,
    or byte offset in a piece after the first), or is counted when `skip`."""
    if path.endswith(".parquet"):
        f = _parquet(path)
        groups = piece[1] if piece else list(range(f.metadata.num_row_groups))
        row = sum(f.metadata.row_group(g).num_rows for g in range(groups[0])) if groups else 0
        for batch in f.iter_batches(columns=[key], batch_size=1024, row_groups=groups):
            for v in batch.column(0).to_pylist():
                row += 1
                if v is None:
                    if not skip:
                        raise CorruptDataError(f"{path}: row {row - 1}: no text in '{key}'")
                    counts["skipped"] += 1
                    continue
                yield v
        return
    is_json = ".jsonl" in path or ".json" in path or ".ndjson" in path
    raw = _open(path)
    f = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
    numbered = piece is None or piece[1][0] == 0

    def where(n, pos):
        return f"line {n + 1}" if numbered else f"the line at byte {pos}"

    with raw, f:
        if not is_json and not per_line:
            data = f.read()
            try:
                yield data.decode("utf-8")
            except UnicodeDecodeError as e:
                if not skip:
                    raise CorruptDataError(f"{path}: document 0: invalid UTF-8 at byte "
                                           f"{e.start}") from None
                counts["skipped"] += 1
            return
        for n, (pos, line) in enumerate(_lines(f, piece)):
            try:
                text = line.decode("utf-8")
                if is_json:
                    if not text.strip():
                        continue
                    obj = json.loads(text)
                    text = obj[key]
                    if not isinstance(text, str):
                        raise KeyError(key)
                else:
                    text = text.rstrip("\n")
                    if not text:
                        continue
            except UnicodeDecodeError as e:
                if not skip:
                    raise CorruptDataError(f"{path}: {where(n, pos)}: invalid UTF-8 at byte "
                                           f"{e.start} of the line") from None
                counts["skipped"] += 1
                continue
            except (ValueError, KeyError, TypeError) as e:
                if not skip:
                    raise CorruptDataError(f"{path}: {where(n, pos)}: not a JSON object with a "
                                           f"string '{key}' ({type(e).__name__}: {e})") from None
                counts["skipped"] += 1
                continue
            yield text


def _eos_id(tok, given):
    if given is not None:
        return int(given)
    for name in _EOS_NAMES:
        i = tok.token_to_id(name)
        if i is not None:
            return i
    raise InvalidArgumentError("the tokenizer has none of " + ", ".join(_EOS_NAMES) +
                               "; give the end-of-document id with eos=ID")


def _shard_job(args):
    (index, path, piece, out_spec, tokenizer_path, eos, dtype, key, per_line, skip, batch) = args
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    ext = require_extension("stoker convert text:")
    tok = Tokenizer.from_file(tokenizer_path)
    w = ext.TokenWriter(out_spec, dtype=dtype, vocab_size=tok.get_vocab_size(with_added_tokens=True))
    counts = {"skipped": 0}
    docs = 0
    pending = []

    def flush():
        nonlocal docs
        for enc in tok.encode_batch(pending, add_special_tokens=False):
            ids = enc.ids
            ids.append(eos)
            w.add(ids)
            docs += 1
        pending.clear()

    for text in _documents(path, key, per_line, skip, counts, piece):
        pending.append(text)
        if len(pending) >= batch:
            flush()
    flush()
    outputs = w.finish()
    r = {"index": index, "input": path, "outputs": outputs, "documents": w.documents,
         "tokens": w.tokens, "checksum": w.checksum, "skipped": counts["skipped"]}
    if piece is not None:
        r["piece"] = {"bytes" if piece[0] == "bytes" else "row_groups": list(piece[1])}
    return r


def _write_manifest(path, m):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(m, f, indent=1)
    os.replace(tmp, path)


def _combine(shards):
    h = hashlib.blake2b(digest_size=8)
    for s in shards:
        h.update(int(s["checksum"], 16).to_bytes(8, "little"))
        h.update(int(s["tokens"]).to_bytes(8, "little"))
    return h.hexdigest()


def tokenize(src, dst, resume=False, workers=0, batch=512, progress=True):
    """Runs the conversion; returns the manifest dict."""
    pattern, sopts = _parse(src, "text:")
    prefix, dopts = _parse(dst, "tokens:")
    if "tokenizer" not in dopts:
        raise InvalidArgumentError("tokens: output needs ?tokenizer=PATH/tokenizer.json")
    tokenizer_path = dopts["tokenizer"]
    if not os.path.isfile(tokenizer_path):
        raise NotFoundError(f"{tokenizer_path}: no such tokenizer file")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos = _eos_id(tok, dopts.get("eos"))
    fmt = dopts.get("format", "megatron")
    if fmt not in ("megatron", "nanogpt", "llmc"):
        raise InvalidArgumentError(f"format={fmt} is not one of megatron, nanogpt, llmc")
    dtype = dopts.get("dtype") or ("uint16" if vocab < 65500 else ("uint32" if fmt != "megatron" else "int32"))
    files = _expand(pattern)
    out_dir = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.basename(prefix)
    with open(tokenizer_path, "rb") as f:
        tok_sha = hashlib.sha256(f.read()).hexdigest()
    split = _parse_size(sopts.get("split", "256m"))
    options = {"format": fmt, "dtype": dtype, "eos": eos, "key": sopts.get("key", "text"),
               "per": sopts.get("per", "file"), "on_error": sopts.get("on_error", "fail"),
               "split": split}
    mpath = os.path.join(out_dir, MANIFEST)
    done = {}
    if os.path.exists(mpath):
        with open(mpath) as f:
            old = json.load(f)
        if not resume and old.get("complete"):
            return dict(old, already_complete=True)
        if not resume:
            raise InvalidArgumentError(f"{mpath} records an unfinished conversion: run again "
                                       f"with --resume, or remove it")
        if old.get("tokenizer_sha256") != tok_sha or old.get("options") != options or \
                old.get("inputs") != files:
            raise InvalidArgumentError(f"{mpath} was written with other inputs, tokenizer or "
                                       f"options; --resume would mix two corpora")
        done = {s["index"]: s for s in old["shards"]}
    m = {"stoker_token_manifest": 1, "complete": False, "source": src, "dst": dst,
         "tokenizer": tokenizer_path, "tokenizer_sha256": tok_sha, "vocab_size": vocab,
         "inputs": files, "options": options, "shards": sorted(done.values(), key=lambda s: s["index"])}
    _write_manifest(mpath, m)
    pieces = [(path, piece) for path in files
              for piece in _pieces(path, split, options["per"] == "line")]
    jobs = []
    for i, (path, piece) in enumerate(pieces):
        if i in done:
            continue
        name = f"{base}-{i:05d}"
        if fmt == "megatron":
            spec = "megatron:" + os.path.join(out_dir, name + "_text_document")
        elif fmt == "nanogpt":
            spec = "nanogpt:" + os.path.join(out_dir, name + ".bin")
        else:
            spec = "llmc:" + os.path.join(out_dir, name + "_%06d.bin")
        jobs.append((i, path, piece, spec, tokenizer_path, eos, dtype, options["key"],
                     options["per"] == "line", options["on_error"] == "skip", batch))
    n = workers or max(1, min(len(jobs), os.cpu_count() or 1))
    t0 = time.time()
    total_files = len(pieces)
    shards = list(m["shards"])
    ctx = mp.get_context("spawn")
    if jobs:
        with ctx.Pool(n) as pool:
            for r in pool.imap_unordered(_shard_job, jobs):
                r["outputs"] = [os.path.relpath(p, out_dir) for p in r["outputs"]]
                shards.append(r)
                shards.sort(key=lambda s: s["index"])
                m["shards"] = shards
                _write_manifest(mpath, m)
                if progress:
                    toks = sum(s["tokens"] for s in shards)
                    dt = time.time() - t0
                    print(f"\rtokenize: {len(shards)}/{total_files} pieces of {len(files)} "
                          f"file(s), {toks:,} tokens, "
                          f"{toks / max(dt, 1e-9) / 1e6:.2f} M tokens/s", end="", file=sys.stderr)
    if progress and jobs:
        print(file=sys.stderr)
    m["complete"] = True
    m["documents"] = sum(s["documents"] for s in shards)
    m["tokens"] = sum(s["tokens"] for s in shards)
    m["skipped"] = sum(s["skipped"] for s in shards)
    m["checksum"] = _combine(shards)
    m["seconds"] = time.time() - t0
    _write_manifest(mpath, m)
    return m


def verify(dst):
    """Re-reads every shard of a tokenized corpus; returns (ok, problems, manifest)."""
    ext = require_extension("stoker verify")
    path = dst
    if os.path.isdir(dst):
        path = os.path.join(dst, MANIFEST)
    elif dst.startswith("tokens:"):
        path = os.path.join(os.path.dirname(os.path.abspath(_parse(dst, "tokens:")[0])), MANIFEST)
    with open(path) as f:
        m = json.load(f)
    out_dir = os.path.dirname(os.path.abspath(path))
    problems = []
    if not m.get("complete"):
        problems.append(f"{path}: the conversion is not complete (run it again with --resume)")
    for s in m["shards"]:
        fmt = m["options"]["format"]
        files = [os.path.join(out_dir, p) for p in s["outputs"]]
        if fmt == "megatron":
            spec = "megatron:" + files[0][:-4]
        else:
            spec = f"{fmt}:" + ",".join(files)
        try:
            docs, toks, ck = ext.token_checksum(spec, m["options"]["eos"] if fmt != "megatron" else -1)
        except Exception as e:  # noqa: BLE001 -- reported per shard
            problems.append(f"{s['outputs'][0]}: {e}")
            continue
        if toks != s["tokens"] or ck != s["checksum"] or (fmt == "megatron" and docs != s["documents"]):
            problems.append(f"{s['outputs'][0]}: {docs} documents, {toks} tokens, checksum {ck}; "
                            f"the manifest says {s['documents']}, {s['tokens']}, {s['checksum']}")
    if m.get("complete") and _combine(m["shards"]) != m.get("checksum"):
        problems.append(f"{path}: the corpus checksum does not match its shards")
    return not problems, problems, m
