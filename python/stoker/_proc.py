"""Readers for /proc: per-process CPU time, page faults, threads and private anonymous
memory. Linux only; every function returns None where /proc is not available."""

import os

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_times(pid):
    """(user s, system s, minor faults, major faults) of process `pid` (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after it.
    fields = data[data.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); minflt = 10, majflt = 12, utime = 14, stime = 15.
    minflt, majflt = int(fields[7]), int(fields[9])
    utime, stime = int(fields[11]) / _TICK, int(fields[12]) / _TICK
    return utime, stime, minflt, majflt


def threads(pid):
    """Number of threads of `pid` and their names."""
    try:
        names = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        return len(names), names
    except OSError:
        return None


def private_anon_bytes(pid):
    """Private anonymous memory of `pid`: pages only this process maps that are not backed
    by a file or shared memory. After fork, a page the child writes (a Python refcount
    update is a write) is copied and counted here: this is the copy-on-read growth."""
    total = 0
    anon = False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                first = line.split(maxsplit=1)[0]
                if not first.endswith(":"):  # a mapping header: "start-end perms off dev inode [path]"
                    parts = line.split(maxsplit=5)
                    path = parts[5].strip() if len(parts) > 5 else ""
                    anon = path == "" or path in ("[heap]", "[stack]") or path.startswith("[anon")
                elif anon and first in ("Private_Dirty:", "Private_Clean:"):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return None
    return total


def children(pid=None):
    """Child process ids of `pid` (default: this process)."""
    pid = pid or os.getpid()
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        return []
    return out
