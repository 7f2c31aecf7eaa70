"""Worker-thread limiters, one per Trio run: CPU work that must not hold the event loop (cron
arithmetic, dry-run replay) runs in `trio.to_thread` under a limiter named here, so each kind of
work has at most its own few threads however many requests ask for it."""

from __future__ import annotations

import trio

_LIMITERS: trio.lowlevel.RunVar[dict[str, trio.CapacityLimiter]] = trio.lowlevel.RunVar("foliot_limiters")


def run_limiter(name: str, threads: int) -> trio.CapacityLimiter:
    """This run's limiter `name` of `threads` worker threads (made on first use)."""
    try:
        found = _LIMITERS.get()
    except LookupError:
        found = {}
        _LIMITERS.set(found)
    limiter = found.get(name)
    if limiter is None:
        limiter = found[name] = trio.CapacityLimiter(threads)
    return limiter
