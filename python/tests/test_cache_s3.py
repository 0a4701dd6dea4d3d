"""cache_dir= in front of s3:// data (issue 14 item 2 over item 1), against the real S3Proxy
of scripts/servers/s3.sh: the first epoch fills the cache, the second fetches nothing from
the server, and both give the batches of the same shards read from local disk, byte for byte.

What crosses the wire is counted by a small TCP relay between stoker and the server (bytes
from the server, and object reads: GETs with a Range header, which is how the s3:// Env reads
data; listing and HEAD requests carry no object bytes)."""
import os
import re
import socket
import threading
import uuid

import pytest

import stoker
from stoker_testing import batch_digest, need_server, needs_ext, write_wds_shards

VARS = ["STOKER_TEST_S3_ENDPOINT", "STOKER_TEST_S3_KEY", "STOKER_TEST_S3_SECRET",
        "STOKER_TEST_S3_BUCKET"]
OPTS = dict(decode="val", image_size=16, val_resize=18, threads=2, shuffle=True, seed=5,
            batch_size=4, shuffle_buffer=8)


def _need_server():
    need_server(VARS, "S3 test server (scripts/servers/s3.sh)")


class CountingRelay:
    """127.0.0.1:port -> the server; counts bytes from the server and ranged GETs."""

    def __init__(self, host, port):
        self.target = (host, port)
        self.lock = threading.Lock()
        self.server_bytes = 0
        self.range_gets = 0
        self.requests = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self):
        with self.lock:
            self.server_bytes = self.range_gets = self.requests = 0

    def snapshot(self):
        with self.lock:
            return self.server_bytes, self.range_gets, self.requests

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, False), daemon=True).start()

    def _pump(self, src, dst, from_client):
        tail = b""
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if from_client:
                    # Request heads (the client sends no bodies here: reads only).
                    text = tail + b
                    n_req = len(re.findall(rb"(?:^|\r\n)(?:GET|HEAD|PUT|POST|DELETE) /", text))
                    n_range = len(re.findall(rb"\r\n[Rr]ange: *bytes=", text))
                    tail = text[-64:]
                    with self.lock:
                        self.requests += n_req
                        self.range_gets += n_range
                else:
                    with self.lock:
                        self.server_bytes += len(b)
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()

    def close(self):
        self.closed = True
        self.sock.close()


@needs_ext
def test_cache_in_front_of_s3_second_epoch_fetches_nothing(image_folder, tmp_path, monkeypatch):
    _need_server()
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    e = os.environ
    m = re.match(r"https?://([^:/]+):(\d+)", e["STOKER_TEST_S3_ENDPOINT"])
    relay = CountingRelay(m.group(1), int(m.group(2)))
    try:
        local = tmp_path / "local"
        local.mkdir()
        shards = write_wds_shards(image_folder, str(local))
        total = sum(os.path.getsize(s) for s in shards)
        bucket, prefix = e["STOKER_TEST_S3_BUCKET"], "cache-" + uuid.uuid4().hex[:8]
        client = boto3.client(
            "s3", endpoint_url=e["STOKER_TEST_S3_ENDPOINT"],
            aws_access_key_id=e["STOKER_TEST_S3_KEY"],
            aws_secret_access_key=e["STOKER_TEST_S3_SECRET"], region_name="us-east-1",
            config=Config(request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"))
        for s in shards:
            client.upload_file(s, bucket, f"{prefix}/{os.path.basename(s)}")
        for k, v in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{relay.port}",
                     "AWS_ACCESS_KEY_ID": e["STOKER_TEST_S3_KEY"],
                     "AWS_SECRET_ACCESS_KEY": e["STOKER_TEST_S3_SECRET"],
                     "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(k, v)
        pattern = "train-{000..%03d}.tar" % (len(shards) - 1)
        ref = batch_digest(stoker.Pipeline(str(local / pattern), **OPTS))
        assert len(ref) == 24 // OPTS["batch_size"]

        url = f"s3://{bucket}/{prefix}/{pattern}"
        cache = tmp_path / "cache"
        relay.reset()
        p = stoker.Pipeline(url, cache_dir=str(cache), cache_limit="64MB", **OPTS)
        assert batch_digest(p) == ref
        c1 = p.stats()["cache"]
        del p
        import gc
        gc.collect()
        cold_bytes, cold_gets, _ = relay.snapshot()
        assert c1["fetched_bytes"] == total and c1["fetches"] == len(shards), c1
        assert cold_bytes >= total and cold_gets >= len(shards)
        entries = [f for f in os.listdir(cache / "entries") if "." not in f]
        assert len(entries) == len(shards)

        # The second epoch (a new pipeline, as a later run): nothing from the server but
        # listing and metadata requests.
        relay.reset()
        q = stoker.Pipeline(url, cache_dir=str(cache), cache_limit="64MB", **OPTS)
        assert batch_digest(q) == ref
        c2 = q.stats()["cache"]
        warm_bytes, warm_gets, warm_requests = relay.snapshot()
        assert c2["fetched_bytes"] == 0 and c2["stream_bytes"] == 0, c2
        assert c2["hit_rate"] == 1.0, c2
        assert warm_gets == 0, f"{warm_gets} ranged GETs in the warm epoch"
        assert warm_requests > 0  # the relay did carry its listing and HEADs
        assert warm_bytes < total / 4, (warm_bytes, total)
        for s in shards:
            client.delete_object(Bucket=bucket, Key=f"{prefix}/{os.path.basename(s)}")
    finally:
        relay.close()
