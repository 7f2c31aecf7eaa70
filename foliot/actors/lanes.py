"""Per-app lanes for work that enters without a caller: a schedule's fire today (the triggers of
issue "Events and answers" next).

A request from an app is refused at once when the engine is saturated (`admission.py`); work the
engine makes for an app on its own has nobody to refuse, and must not be dropped either. It
takes a token of its app's lane first: each app may start `rate` such runs per second (a bucket
holding `burst`). Without a token the work is put off, durably, to when the app's next token is
due: a schedule's fire hands its timer back to the wheel for then (`TimerWheel.defer`), so it
holds none of the wheel's firings in flight, which every other app's sleeps and deadlines
share. One app's 2,000 `every: 1s` schedules then wait behind each other, not in front of the
other apps. A fire put off is late, never missed; its catch-up window decides as for any late
fire.

Time is passed in (seconds on any monotonic clock). A lane is forgotten once full again, so the
memory follows the apps with recent work, not the apps there are. An app whose limits override
the rate or burst (`PUT /admin/apps/{app}/limits`) passes its own to `take`.
"""

from __future__ import annotations

from collections.abc import Hashable


class Lanes:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate = max(float(rate), 0.001)
        self.burst = float(max(1, burst))
        self._lanes: dict[str, tuple[float, float, float, float]] = {}  # app -> (tokens, at, rate, burst)
        self.taken = 0
        self.deferred = 0
        self._calls = 0
        self._held: dict[Hashable, float] = {}  # reservations: who -> its turn

    def take(
        self,
        app: str,
        now: float,
        rate: float | None = None,
        burst: int | None = None,
        who: Hashable | None = None,
    ) -> float:
        """Take one of `app`'s tokens: 0.0, or (none left) the seconds until its turn.
        `rate`, `burst`: the app's own (None: the node's).

        With `who` (one piece of work that will come back, a timer's firing), a token that is
        not there yet is *reserved*: the bucket goes into debt and `who` gets its own turn, the
        n-th waiting one n / rate seconds on, so waiting work comes back spread out, once each,
        not all at the next token (the noisy-neighbour bench: 2,395 fires had cost a million
        firings of the wheel). When `who` comes back at its turn it takes its reservation."""
        self._forget_full(now)
        if who is not None and who in self._held:
            due = self._held[who]
            if due <= now + 1e-6:
                del self._held[who]
                self.taken += 1
                return 0.0
            return due - now
        rate = self.rate if rate is None else max(float(rate), 0.001)
        full = self.burst if burst is None else float(max(1, burst))
        tokens = self._refilled(app, now, rate, full)
        if tokens >= 1:
            self._lanes[app] = (tokens - 1, now, rate, full)
            self.taken += 1
            return 0.0
        self.deferred += 1
        if who is None:
            self._lanes[app] = (tokens, now, rate, full)
            return (1 - tokens) / rate
        tokens -= 1  # reserved: in debt until its turn
        self._lanes[app] = (tokens, now, rate, full)
        due = now - tokens / rate
        self._held[who] = due
        return due - now

    def take_up_to(self, app: str, n: int, now: float) -> tuple[int, float]:
        """Take up to `n` of `app`'s tokens: (how many were taken, and when fewer than `n`, the
        seconds until the next one)."""
        self._forget_full(now)
        tokens = self._refilled(app, now, self.rate, self.burst)
        granted = min(n, int(tokens))
        self._lanes[app] = (tokens - granted, now, self.rate, self.burst)
        self.taken += granted
        if granted < n:
            self.deferred += 1
            return granted, (1 - (tokens - granted)) / self.rate
        return granted, 0.0

    def _refilled(self, app: str, now: float, rate: float, full: float) -> float:
        """`app`'s tokens now (a new lane starts full)."""
        tokens, at, _, _ = self._lanes.get(app, (full, now, rate, full))
        return min(full, tokens + (now - at) * rate)

    def _forget_full(self, now: float) -> None:
        """Every few hundred takes: drop the lanes refilled since (a new one starts full)."""
        self._calls += 1
        if self._calls % 256:
            return
        full = [a for a, (t, at, rate, burst) in self._lanes.items() if t + (now - at) * rate >= burst]
        for app in full:
            del self._lanes[app]
        stale = [w for w, due in self._held.items() if due < now - 600]
        for w in stale:  # never came back (its schedule changed or was deleted)
            del self._held[w]
