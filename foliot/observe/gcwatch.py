"""The cyclic garbage collector's pauses, and keeping start-up's objects out of its way.

CPython's collector stops the whole process while it walks every tracked container of the
generation it collects. A full collection (generation 2) walks everything the process holds:
modules, classes and functions loaded at start-up, and every live actor. Each such pause is a
latency spike for every request in flight, and with many live actors it is the tail of the
latency distribution (`bench/signal_latency.py` with 15,000 live runs).

`watch()` measures the pauses (a `gc.callbacks` hook, process-wide: a process has one
collector), read by `/metrics` as `foliot_gc_collections_total`, `foliot_gc_pause_seconds_total`
and `foliot_gc_pause_max_seconds` per generation.

`freeze_startup()` runs one full collection, then moves every object that survived it into
the permanent generation (`gc.freeze()`), which collections no longer walk: what exists once
the server is ready (imports, the app, the engine, its caches) lives for the life of the
process anyway. Objects frozen are still freed by reference counting; only a reference cycle
among them would never be collected, which is why the freeze happens once, at start-up,
right after a full collection, and not again. `foliot serve` does it (`FOLIOT_GC_FREEZE=0`
turns it off); in-process test servers do not, since their process hosts many of them.
"""

from __future__ import annotations

import gc
import time
from typing import Any

GENERATIONS = (0, 1, 2)


class GcWatch:
    """Counts, total and longest pause per generation, since `watch()`."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.pause_s = [0.0, 0.0, 0.0]
        self.max_pause_s = [0.0, 0.0, 0.0]
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        generation = info.get("generation", 2)
        pause = time.perf_counter() - self._began
        self.collections[generation] += 1
        self.pause_s[generation] += pause
        if pause > self.max_pause_s[generation]:
            self.max_pause_s[generation] = pause


_WATCH: GcWatch | None = None


def watch() -> GcWatch:
    """The process's watch, installed on first use."""
    global _WATCH
    if _WATCH is None:
        _WATCH = GcWatch()
        gc.callbacks.append(_WATCH)
    return _WATCH


def freeze_startup() -> int:
    """Collect, then freeze what survived; the number of objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
