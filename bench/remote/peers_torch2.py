"""The torch >= 2 peers of bench/remote/run_bench.py, run by the peer interpreter
(.venv-torch2/bin/python; bench/install-torch2-peers.sh), one process per side and round:

    peers_torch2.py prepare-mds     SHARDS_DIR OUT_DIR SHARD_MB   (tar shards -> MDS shards)
    peers_torch2.py prepare-litdata SHARDS_DIR OUT_DIR SHARD_MB   (tar shards -> litdata.optimize)
    peers_torch2.py run SIDE S3_URI ENDPOINT WORKERS              (prints {"bytes", "seconds", "samples"})

SIDE is one of
  s3torchconnector  S3IterableDataset.from_objects over the tar shards (enable_sharding: each
                    DataLoader worker takes its share of the shards), each object's reader
                    streamed through webdataset's tar iterator (its documented WebDataset recipe),
                    samples grouped by key as webdataset does; S3ClientConfig(force_path_style)
  mds               MosaicML Streaming: StreamingDataset(remote=s3://..., local=<fresh temp dir>),
                    endpoint from S3_ENDPOINT_URL, credentials from AWS_* (its documented way).
                    Against S3Proxy with 8 workers most runs fail (a downloaded shard comes out
                    with the right size and shifted content; bench/RESULTS.md has the details)
  litdata           LitData: StreamingDataset("s3://...", storage_options={endpoint_url, keys},
                    cache_dir=<fresh temp dir>) + StreamingDataLoader
Every side: a DataLoader (StreamingDataLoader for LitData) with WORKERS worker processes and
batches of 32 samples; the bytes of every sample's fields are counted in the main process
(I/O only, no decode). The wall time covers the dataset's construction (listing, index
download) and the whole epoch, not the interpreter's start and the imports of torch and the
side's library; a fresh local cache every run (cold epoch).
Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in the environment.
"""

import json
import os
import shutil
import sys
import tarfile
import tempfile
import time

import torch


def tar_samples(path):
    """(key, {ext: bytes}) of a WebDataset tar, in order."""
    cur, fields = None, {}
    with tarfile.open(path) as t:
        for m in t:
            if not m.isfile():
                continue
            key, ext = m.name.rsplit(".", 1) if "." in os.path.basename(m.name) else (m.name, "")
            if key != cur and cur is not None:
                yield cur, fields
                fields = {}
            cur = key
            fields[ext] = t.extractfile(m).read()
    if cur is not None:
        yield cur, fields


def all_samples(shards_dir):
    for f in sorted(os.listdir(shards_dir)):
        if f.endswith(".tar"):
            yield from tar_samples(os.path.join(shards_dir, f))


def prepare_mds(shards_dir, out, shard_mb):
    from streaming import MDSWriter

    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=out, columns={"key": "str", "jpg": "bytes", "cls": "bytes"},
                   size_limit=int(shard_mb * 1e6)) as w:
        for key, f in all_samples(shards_dir):
            w.write({"key": key, "jpg": f["jpg"], "cls": f["cls"]})


def _litdata_items(shards_dir):
    return list(all_samples(shards_dir))


def _litdata_fn(item):
    key, f = item
    return {"key": key, "jpg": f["jpg"], "cls": f["cls"]}


def prepare_litdata(shards_dir, out, shard_mb):
    from litdata import optimize

    shutil.rmtree(out, ignore_errors=True)
    optimize(fn=_litdata_fn, inputs=_litdata_items(shards_dir), output_dir=out,
             chunk_bytes=f"{int(shard_mb)}MB", num_workers=1, mode="overwrite")


def _count(x):
    """Bytes of the sample fields in a collated batch (lists of bytes/str, tensors)."""
    if isinstance(x, (bytes, bytearray)):
        return len(x)
    if isinstance(x, str):
        return 0  # keys and URLs are not sample bytes
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, dict):
        return sum(_count(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_count(v) for v in x)
    return 0


def _bytes(x):
    if isinstance(x, memoryview):  # LitData hands out views into its chunk: not picklable
        return x.tobytes()
    if isinstance(x, dict):
        return {k: _bytes(v) for k, v in x.items()}
    return x


def _collate(batch):
    """In the worker: the batch as a list of samples, bytes as bytes (views copied out)."""
    return [_bytes(s) for s in batch]


def _wds_samples(reader):
    """One tar object -> samples grouped by key (webdataset's tar iterator, its recipe)."""
    from webdataset.tariterators import group_by_keys, tar_file_expander

    return group_by_keys(tar_file_expander([{"url": reader.key, "stream": reader}]))


class _S3TarSamples(torch.utils.data.IterableDataset):
    """IterableDataset: S3IterableDataset of tar objects -> samples."""

    def __init__(self, objects, endpoint, workers):
        from s3torchconnector import S3ClientConfig, S3IterableDataset

        self.ds = S3IterableDataset.from_objects(
            objects, region=os.environ.get("AWS_REGION", "us-east-1"), endpoint=endpoint,
            enable_sharding=workers > 0, s3client_config=S3ClientConfig(force_path_style=True))

    def __iter__(self):
        for reader in self.ds:
            yield from _wds_samples(reader)


def run(side, uri, endpoint, workers):
    # The side's library is imported before the clock starts (a training job has it loaded):
    # the time covers the dataset's construction (listing, index download) and the epoch.
    if side == "s3torchconnector":
        import boto3  # noqa: F401
        import s3torchconnector  # noqa: F401
        import webdataset  # noqa: F401
    elif side == "mds":
        import streaming  # noqa: F401
    elif side == "litdata":
        import litdata  # noqa: F401
    tmp = tempfile.mkdtemp(prefix=f"peer-{side}-")
    t0 = time.perf_counter()
    try:
        if side == "s3torchconnector":
            import boto3

            bucket, prefix = uri[len("s3://"):].split("/", 1)
            c = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            keys = sorted(o["Key"] for o in c.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix.rstrip("/") + "/").search("Contents") if o and
                o["Key"].endswith(".tar"))
            base = _S3TarSamples([f"s3://{bucket}/{k}" for k in keys], endpoint, workers)
            dl = torch.utils.data.DataLoader(base, batch_size=32, num_workers=workers,
                                             collate_fn=_collate)
        elif side == "mds":
            from streaming import StreamingDataset
            from streaming.base.util import clean_stale_shared_memory

            clean_stale_shared_memory()  # its documented remedy for a previous run's leftovers
            os.environ.setdefault("S3_ENDPOINT_URL", endpoint)
            ds = StreamingDataset(remote=uri, local=os.path.join(tmp, "local"), shuffle=False,
                                  batch_size=32)
            dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=workers,
                                             collate_fn=_collate)
        elif side == "litdata":
            from litdata import StreamingDataLoader, StreamingDataset
            from litdata.streaming import downloader

            # LitData's chunk downloads go through obstore, whose client refuses plain-HTTP
            # endpoints ("HTTP error: builder error ... BadScheme") unless allow_http is set,
            # and LitData (0.2.76) passes no way to set it: the one change made to it here.
            if endpoint.startswith("http://"):
                downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
            ds = StreamingDataset(uri, cache_dir=os.path.join(tmp, "cache"), shuffle=False,
                                  storage_options={
                                      "endpoint_url": endpoint,
                                      "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
                                      "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
                                      "region_name": os.environ.get("AWS_REGION", "us-east-1")})
            dl = StreamingDataLoader(ds, batch_size=32, num_workers=workers, collate_fn=_collate)
        else:
            raise SystemExit(f"unknown side {side}")
        n = samples = 0
        for batch in dl:
            samples += len(batch)
            n += _count(batch)
        dt = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"bytes": n, "seconds": dt, "samples": samples}


def main():
    cmd = sys.argv[1]
    if cmd == "prepare-mds":
        prepare_mds(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif cmd == "prepare-litdata":
        prepare_litdata(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif cmd == "run":
        print(json.dumps(run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
