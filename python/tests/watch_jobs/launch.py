"""A torchrun-style launcher: starts --nproc copies of a script with the environment
torchrun gives each rank (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), waits for all and exits with the first non-zero status.

    python launch.py --nproc 2 train.py --ddp ...

(Debian's torch 1.13 ships torch.distributed.run, but on Python 3.11 it fails before
starting any rank: Std.from_str cannot map "0" to Std.NONE, an enum change in 3.11.)
"""

import os
import socket
import subprocess
import sys


def main():
    args = sys.argv[1:]
    n = 2
    if args[:1] == ["--nproc"]:
        n, args = int(args[1]), args[2:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable] + args, env=env))
    codes = [p.wait() for p in procs]
    sys.exit(next((c for c in codes if c != 0), 0))


if __name__ == "__main__":
    main()
