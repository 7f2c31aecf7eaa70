"""The latency gate: refuse new work while a standing queue holds requests past a target.

Pure (time is passed in, seconds on any monotonic clock), so it is tested without Trio.

Detection is CoDel's (Nichols & Jacobson): a queue that only absorbs a burst lets *some*
requests through quickly; when even the fastest start or signal answered during a whole
`interval` took at least `target`, a standing queue has formed and the gate starts shedding.

While shedding, at most `limit` starts and signals are served at once, from Little's law:
`limit = max(floor, throughput x target)`, the throughput being the answers per second over the
last `window` intervals. Holding that many in flight keeps their mean queueing delay near
`target`; what arrives past them is refused at once (429 with Retry-After) instead of waiting.
The gate stops shedding after an interval in which it had to refuse nothing: the load fits
again. `floor` keeps a node that answers little (idle, or just started) from refusing small
bursts.

An answer may come without a latency (`None`): a signal that waited behind other messages of
its own run. It counts towards the throughput but not towards the standing-queue test, so a
burst to one run (per-run back-pressure: its bounded mailbox) never sheds everyone's traffic.
An interval needs `evidence` timed answers to show a standing queue: one or two slow answers
(a lone start whose commit waited for a burst of others) say nothing about a queue.
"""

from __future__ import annotations

import math
from collections import deque


class LatencyGate:
    def __init__(
        self, target_s: float, interval_s: float, *, floor: int = 8, window: int = 5, evidence: int = 3
    ) -> None:
        self.target_s = target_s
        self.evidence = max(1, evidence)
        self.interval_s = interval_s
        self.floor = max(1, floor)
        self.enabled = target_s > 0 and interval_s > 0
        self.shedding = False
        self._start: float | None = None  # when the current interval began
        self._min = math.inf  # fastest answer in the current interval
        self._answered = 0
        self._timed = 0  # answers of the current interval that came with a latency
        self._refused = 0
        self._history: deque[int] = deque(maxlen=max(1, window))  # answers per past interval
        self.last_min_s: float | None = None  # fastest answer of the last finished interval
        self.episodes = 0  # times shedding began

    @property
    def throughput(self) -> float:
        """Answers per second over the finished intervals in the window."""
        if not self._history:
            return 0.0
        return sum(self._history) / (len(self._history) * self.interval_s)

    @property
    def limit(self) -> int | None:
        """Starts and signals served at once while shedding (None: not shedding)."""
        if not self.shedding:
            return None
        return max(self.floor, int(self.throughput * self.target_s))

    def admit(self, now: float, inflight: int) -> bool:
        """May a new start or signal be served, with `inflight` others being served now?"""
        if not self.enabled:
            return True
        self._roll(now)
        limit = self.limit
        if limit is not None and inflight >= limit:
            self._refused += 1
            return False
        return True

    def answered(self, now: float, latency_s: float | None) -> None:
        """An admitted start or signal was answered after `latency_s` (None: it queued behind
        its own run, so its wait does not tell about the engine's queue)."""
        if not self.enabled:
            return
        self._roll(now)
        self._answered += 1
        if latency_s is not None:
            self._timed += 1
            self._min = min(self._min, latency_s)

    def _roll(self, now: float) -> None:
        if self._start is None:
            self._start = now
            return
        if now < self._start + self.interval_s:
            return
        # The interval just finished decides; idle intervals after it count as empty.
        if self.shedding:
            if self._refused == 0:
                self.shedding = False
        elif self._timed >= self.evidence and self._min >= self.target_s:
            self.shedding = True
            self.episodes += 1
        self.last_min_s = self._min if self._timed else None
        self._history.append(self._answered)
        # At least one: `now` is past the interval's end, whatever the float division says.
        passed = max(1, int((now - self._start) / self.interval_s))
        for _ in range(min(passed - 1, self._history.maxlen or 0)):
            self._history.append(0)
        if passed > 1:
            self.shedding = False  # a whole interval went by with nothing refused
        self._start += passed * self.interval_s
        self._min = math.inf
        self._answered = 0
        self._timed = 0
        self._refused = 0
