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

**Before the first answer.** The test above needs answers, and the first ones come only after
the queue has formed: until then requests pile up behind them. So, whether shedding or not,
at most `queue_s` (0.5 s) of work at the measured throughput is served at once, and never
fewer than `burst` (64), so a cold node still takes a burst (`admit_queued`; the work counted
is what is authenticated, read and not answered yet: `Admission`).

An answer may come without a latency (`None`): a signal that waited behind other messages of
its own run. It counts towards the throughput but not towards the standing-queue test, so a
burst to one run (per-run back-pressure: its bounded mailbox) never sheds everyone's traffic.
An interval needs `evidence` timed answers to show a standing queue: one or two slow answers
(a lone start whose commit waited for a burst of others) say nothing about a queue.

**The queue before the edge.** An answer's latency counts from admission, but a process whose
CPU is oversubscribed reads its sockets late: requests then wait in the kernel and in the HTTP
server, where no admission sees them, and even a refusal takes seconds to leave. The work
admitted is also more than the answers count: each signal's push and the task answer's commit
come after the signal was answered. The symptom of both is an event loop that runs late, which
`lagged` reports (how late a sleeper woke, from `Admission.watch_lag`). With a `lag` bound
(`FOLIOT_ADMISSION_LAG_MS`; 0, the default, only measures), two intervals running in which no
wake-up came within `lag` (or the sleeper was still that overdue when they ended) start
shedding like a standing queue and halve the limit (down to one at once); an interval in
which the loop was never `lag / 2` late doubles it back. Admitting fewer leaves the CPU to
read and refuse what arrives, so refusals stay fast from the caller's side. It is off by
default because a lone burst of CPU work (50 concurrent signals to one run on a slow machine)
makes the loop late too, and would be shed.
"""

from __future__ import annotations

import math
from collections import deque


class LatencyGate:
    def __init__(
        self,
        target_s: float,
        interval_s: float,
        *,
        floor: int = 8,
        window: int = 5,
        evidence: int = 3,
        lag_s: float = 0.0,
        burst: int = 64,
        queue_s: float = 0.5,
    ) -> None:
        self.target_s = target_s
        self.burst = max(1, burst)  # let in at once whatever the throughput (`admit_queued`)
        self.queue_s = queue_s  # work queued at the measured throughput, at most
        self.evidence = max(1, evidence)
        self.interval_s = interval_s
        self.floor = max(1, floor)
        self.enabled = target_s > 0 and interval_s > 0
        self.lag_s = lag_s  # event-loop lag that sheds (0: measured only)
        self.shedding = False
        self._start: float | None = None  # when the current interval began
        self._min = math.inf  # fastest answer in the current interval
        self._answered = 0
        self._timed = 0  # answers of the current interval that came with a latency
        self._refused = 0
        self.window = max(1, window)
        self._history: deque[int] = deque(maxlen=self.window)  # answers per past interval
        self.last_min_s: float | None = None  # fastest answer of the last finished interval
        self.episodes = 0  # times shedding began
        self._lag = 0.0  # the event loop's largest lag in the current interval
        self._min_lag = math.inf  # the loop's smallest lag in the current interval
        self._wakes = 0  # lag probes that woke in the current interval
        self._was_late = False  # the last finished interval was late as a whole
        self.last_lag_s = 0.0  # the largest lag of the last finished interval
        self.scale = 1.0  # the limit's share while the loop runs late (halved, doubled back)
        self.min_scale = 1 / 64
        self._due: float | None = None  # when the lag probe's sleeper is due

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
        return max(1, int(max(self.floor, int(self.throughput * self.target_s)) * self.scale))

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

    def admit_queued(self, now: float, queued: int) -> bool:
        """May one more start or signal be let in, with `queued` being served (authenticated,
        read, not answered yet)? While shedding, as `admit`. Otherwise at most `queue_s` of work at the
        measured throughput (never fewer than `burst`) waits: the standing queue that builds
        up before the gate has seen an answer, and that a refusal later would only prolong."""
        if not self.enabled:
            return True
        if self.shedding:
            return self.admit(now, queued)
        self._roll(now)
        if queued >= max(self.burst, int(self.throughput * self.queue_s)):
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

    def expect(self, due: float) -> None:
        """A sleeper is due at `due`: until it reports (`lagged`), every interval that ends
        while it is overdue counts its delay so far (a stalled loop has no wake-ups to report)."""
        self._due = due

    def lagged(self, now: float, lag_s: float) -> None:
        """A sleeper due `lag_s` before `now` woke only now: the event loop runs that late."""
        self._due = None
        if not self.enabled:
            return
        # Counted before the roll: a wake-up late by whole intervals tells about the interval
        # it was due in, not the one it woke up in.
        self._lag = max(self._lag, lag_s)
        self._min_lag = min(self._min_lag, lag_s)
        self._wakes += 1
        self._roll(now)

    def _roll(self, now: float) -> None:
        if self._start is None:
            self._start = now
            return
        if now < self._start + self.interval_s:
            return
        # The interval just finished decides; idle intervals after it count as empty.
        overdue = now - self._due if self._due is not None and now > self._due else 0.0
        self._lag = max(self._lag, overdue)
        # Late for the whole interval: no wake-up came within the bound (or the sleeper is
        # still overdue), twice running or by two intervals at once: one late wake-up (a
        # collection, a page fault) says nothing.
        whole = bool(self.lag_s) and (
            (self._wakes > 0 and self._min_lag >= self.lag_s) or overdue >= self.lag_s
        )
        late = whole and (self._was_late or self._lag >= 2 * self.interval_s)
        self._was_late = whole
        if self.shedding:
            if self._refused == 0 and not late:
                self.shedding = False
        elif late or (self._timed >= self.evidence and self._min >= self.target_s):
            self.shedding = True
            self.episodes += 1
        if late:
            self.scale = max(self.min_scale, self.scale / 2)
        elif self._lag < self.lag_s / 2 or not self.lag_s:
            self.scale = min(1.0, self.scale * 2)
        self.last_lag_s = self._lag
        self.last_min_s = self._min if self._timed else None
        self._history.append(self._answered)
        # At least one: `now` is past the interval's end, whatever the float division says.
        passed = max(1, int((now - self._start) / self.interval_s))
        for _ in range(min(passed - 1, self._history.maxlen or 0)):
            self._history.append(0)
        if passed > 1 and not late:
            self.shedding = False  # a whole interval went by with nothing refused
        self._start += passed * self.interval_s
        self._min = math.inf
        self._answered = 0
        self._timed = 0
        self._refused = 0
        self._lag = 0.0
        self._min_lag = math.inf
        self._wakes = 0
