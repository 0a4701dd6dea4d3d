"""Delta Lake sources for stoker.Pipeline: version pinning, following a growing table, and
the table state that goes into state_dict().

    p = stoker.Pipeline("delta:/data/table?follow=new", batch_size=256)

A ``delta:`` source is always read at one version per epoch, and state_dict() records it
(``state["delta"]``), so load_state_dict() re-opens exactly that snapshot (by version, time
travel) even after the table grew. With ``follow=`` the pipeline looks for new versions at
the start of each epoch:

* ``follow=snapshot``: each epoch reads the whole table at its newest version;
* ``follow=new``: the first epoch reads the table (or what the spec selects); each later
  epoch reads only the files that data-changing commits added since the version the
  previous epoch read (append-only tables; a delete in between is an error). An epoch with
  nothing new yields no batches.

With several ranks (torch.distributed initialized), rank 0 picks the version and broadcasts
it, so every rank reads the same snapshot. See docs/delta.md.
"""

import sys
from ._errors import _ext, bad_argument

_FOLLOW = ("snapshot", "new")


def split_spec(source):
    """("delta:<table>", [query items without follow], follow or None) of a delta: spec."""
    body = source[len("delta:"):]
    table, _, query = body.partition("?")
    items, follow = [], None
    for item in query.split("&") if query else []:
        if not item:
            continue
        key, _, value = item.partition("=")
        if key == "follow":
            if value not in _FOLLOW:
                raise bad_argument(f"{source}: follow={value!r} is not one of {', '.join(_FOLLOW)}")
            follow = value
        else:
            items.append((key, value))
    return table, items, follow


def _several_ranks():
    """True when torch.distributed runs more than one rank (torch is not imported: not
    imported, it cannot have initialized a process group)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _agreed(value):
    """Rank 0's value on every rank when torch.distributed runs several ranks."""
    # Not imported, torch cannot have initialized a process group: do not import it (about
    # 1 s and hundreds of MB at every Kafka or Delta open of a job that does not use torch).
    if not _several_ranks():
        return value
    import torch.distributed as dist
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class DeltaSource:
    """Which snapshot of a Delta table the engine reads, epoch by epoch."""

    def __init__(self, source):
        self.source = source
        self.table, self._items, self.follow = split_spec(source)
        keep = [(k, v) for k, v in self._items if k not in ("version", "timestamp", "since")]
        self._base = keep
        since = [v for k, v in self._items if k == "since"]
        self.since = int(since[-1]) if since else None
        # The version the user's spec selects now (latest, version= or timestamp=).
        first = _ext.delta_snapshot(self._spec_text(self._items))
        self.version = int(_agreed(first["version"]))

    def _spec_text(self, items):
        q = "&".join(f"{k}={v}" if v != "" else k for k, v in items)
        return self.table + (f"?{q}" if q else "")

    def spec(self):
        """The engine's data spec for the current (version, since)."""
        items = list(self._base) + [("version", str(self.version))]
        if self.since is not None:
            items.append(("since", str(self.since)))
        return "delta:" + self._spec_text(items)

    def advance(self):
        """At the start of a new epoch: moves to the newest version when following. Returns
        "same" (nothing changed), "changed" (re-open the engine) or "empty" (follow=new and
        no new version: the epoch has nothing to read)."""
        if self.follow is None:
            return "same"
        latest = int(_agreed(_ext.delta_latest_version(self.table)))
        if self.follow == "snapshot":
            if latest == self.version:
                return "same"
            self.version = latest
            return "changed"
        if latest == self.version:
            return "empty"
        self.since, self.version = self.version, latest
        return "changed"

    def state(self):
        return {"table": self.table, "version": self.version, "since": self.since,
                "follow": self.follow}

    def load(self, state):
        if not isinstance(state, dict) or "version" not in state:
            raise bad_argument("state['delta'] must be the dict state_dict() saved")
        if state.get("table") != self.table:
            raise bad_argument(f"state is from Delta table {state.get('table')!r}, this pipeline "
                               f"reads {self.table!r}")
        self.version = int(state["version"])
        self.since = None if state.get("since") is None else int(state["since"])
