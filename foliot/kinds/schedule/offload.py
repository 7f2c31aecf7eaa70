"""Cron arithmetic off the event loop (issue 37).

`cronsim` walks the calendar: one next time of a rare expression (`0 0 * 2 1#5`, the fifth
Monday of a February) costs ~2 ms, and 1,000 such schedules listed with 5 next fires each held
the loop for seconds. Every computation of a cron schedule's times made here runs in a worker
thread (`trio.to_thread`, at most `CRON_THREADS` at once per process, so concurrent listings
queue rather than take every core), a listing in slices of `SLICE` schedules per thread call;
one computation is bounded by the horizon of `definition.CRON_HORIZON_YEARS`. `every` is
arithmetic (microseconds) and stays inline, so a timer test under MockClock is not exposed to
the clock jumping while a thread runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, TypeVar

import trio

from ...actors.threads import run_limiter
from ...core.schedule.definition import Schedule, document_fire_rate
from ...core.schedule.machine import ScheduleState

T = TypeVar("T")

CRON_THREADS: Final = 2
SLICE: Final = 32  # schedules whose next fires one thread call computes


def limiter() -> trio.CapacityLimiter:
    """This run's limiter of cron threads."""
    return run_limiter("cron", CRON_THREADS)


async def cron_work(schedule: Schedule, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, pure schedule arithmetic of `schedule`: in a worker thread when it is a
    cron's, inline when `every`'s (arithmetic)."""
    if schedule.cron is None:
        return fn(*args)
    return await trio.to_thread.run_sync(partial(fn, *args), limiter=limiter())


def _next_fires(states: Sequence[ScheduleState], count: int) -> list[list[int]]:
    return [state.next_fires(count) for state in states]


async def next_fires_of(states: Sequence[ScheduleState], count: int) -> list[list[int]]:
    """Each schedule's next `count` scheduled times, in order: `every` inline, cron in worker
    threads, `SLICE` schedules per call."""
    out: list[list[int]] = [[] for _ in states]
    crons = [i for i, state in enumerate(states) if state.schedule.cron is not None]
    for i, state in enumerate(states):
        if state.schedule.cron is None:
            out[i] = state.next_fires(count)
    for start in range(0, len(crons), SLICE):
        part = crons[start : start + SLICE]
        found = await trio.to_thread.run_sync(
            _next_fires, [states[i] for i in part], count, limiter=limiter()
        )
        for i, fires in zip(part, found, strict=True):
            out[i] = fires
    return out


def app_load(documents: Sequence[tuple[str, dict[str, Any]]], name: str) -> tuple[bool, int, float, float]:
    """Of an app's schedules (`documents`), all but `name`: (whether `name` is one of them,
    how many others, their fire rate summed, `name`'s own rate)."""
    exists, others, rate, own = False, 0, 0.0, 0.0
    for other, document in documents:
        fires = document_fire_rate(document)
        if other == name:
            exists, own = True, fires
        else:
            others, rate = others + 1, rate + fires
    return exists, others, rate, own


async def app_load_of(
    documents: Sequence[tuple[str, dict[str, Any]]], name: str
) -> tuple[bool, int, float, float]:
    """`app_load`: in a worker thread when any of them is a cron (its expression is parsed),
    inline when all are `every` (a duration read: microseconds)."""
    if all(document.get("cron") is None for _, document in documents):
        return app_load(documents, name)
    return await trio.to_thread.run_sync(app_load, documents, name, limiter=limiter())
