"""Kafka sources for stoker.Pipeline: a pinned window of offsets per epoch, following a
topic between epochs, and the window that goes into state_dict().

    p = stoker.Pipeline("kafka://127.0.0.1:9092/train?start=earliest", batch_size=256)
    p = stoker.Pipeline("kafka://127.0.0.1:9092/train?follow=new", batch_size=256)

A ``kafka:`` source reads a bounded window of each partition, [begin, end) offsets, that is
resolved on the broker once (``start=``/``end=``/``count=``, see docs/kafka.md) and then
pinned: state_dict() records it (``state["kafka"]["ranges"]``), so load_state_dict()
re-opens exactly that window after a restart, whatever the topic received since, and the
engine's position in the epoch's deterministic order makes the resume exact (nothing
repeated, nothing lost, whatever was in flight or prefetched). With ``follow=new`` each new
epoch reads the messages that arrived since the previous window's end (an epoch with
nothing new yields no batches): a stream cut into epochs.

With several ranks (torch.distributed initialized), rank 0 resolves the window and
broadcasts it, so every rank reads the same one; ranks take disjoint samples of one global
order, as for files.
"""

from ._errors import _ext, bad_argument
from .delta import _agreed, _several_ranks

_FOLLOW = ("new",)


def split_spec(source):
    """(spec without follow, follow or None) of a kafka: spec."""
    base, _, query = source.partition("?")
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
            items.append(item)
    return base + ("?" + "&".join(items) if items else ""), follow


def _ranges(window):
    return {int(w["partition"]): (int(w["begin"]), int(w["end"])) for w in window}


class KafkaSource:
    """Which offsets of a topic the engine reads, epoch by epoch."""

    def __init__(self, source):
        self.source = source
        self.base, self.follow = split_spec(source)
        self.ranges = None
        if _several_ranks():
            # Rank 0 resolves the window and every rank reads that one.
            self.ranges = {int(p): tuple(r) for p, r in
                           _agreed(_ranges(_ext.kafka_window(self.base))).items()}
        # Else the engine resolves it when it opens (one client, not two: 3-7 ms per open)
        # and adopt() pins what it found.

    def spec(self):
        """The engine's data spec for the current window (the unpinned spec before the
        first open, whose window adopt() then pins)."""
        if self.ranges is None:
            return self.base
        return _ext.kafka_pinned_spec(self.base, self.ranges)

    def adopt(self, windows):
        """Pins the window the engine resolved at its first open (windows: its
        ``kafka`` list)."""
        if self.ranges is None:
            self.ranges = _ranges(windows)

    def advance(self):
        """At the start of a new epoch: "same", "changed" (re-open the engine) or "empty"
        (follow=new and nothing arrived since the last window)."""
        if self.follow is None:
            return "same"
        # Everything after the last window's end, up to the high watermark now.
        now = _ext.kafka_window(self.base + ("&" if "?" in self.base else "?") + "start=latest")
        # A partition added since starts at its log start.
        nxt = {int(w["partition"]): (self.ranges[int(w["partition"])][1]
                                     if int(w["partition"]) in self.ranges else int(w["low"]),
                                     int(w["high"])) for w in now}
        nxt = {int(p): tuple(r) for p, r in _agreed(nxt).items()}
        if all(e <= b for b, e in nxt.values()):
            self.ranges = {p: (b, b) for p, (b, _) in nxt.items()}
            return "empty"
        self.ranges = nxt
        return "changed"

    def state(self):
        return {"source": self.base, "ranges": {str(p): list(r) for p, r in self.ranges.items()},
                "follow": self.follow}

    def load(self, state):
        if not isinstance(state, dict) or "ranges" not in state:
            raise bad_argument("state['kafka'] must be the dict state_dict() saved")
        if state.get("source") != self.base:
            raise bad_argument(f"state is from Kafka source {state.get('source')!r}, this "
                               f"pipeline reads {self.base!r}")
        self.ranges = {int(p): (int(r[0]), int(r[1])) for p, r in state["ranges"].items()}
