"""Admission control at the edge: refuse new work at once when the engine is saturated.

Starts and signals are the calls that add work (a run, a step, usually a push). When one of
the engine's bounded stages is full they are refused before anything is read or stored, with
429 `overloaded` and `Retry-After` (503 when the bottleneck is storage), instead of waiting for
minutes in a hidden queue. Saturation is measured, never guessed:

- `inflight`: starts and signals being served right now (`FOLIOT_MAX_INFLIGHT_REQUESTS`);
- `storage`: units of work waiting for the storage writer (`FOLIOT_STORAGE_QUEUE_MAX`);
- `push_backlog`: pushes waiting for a sender (`FOLIOT_PUSH_BACKLOG_MAX`), refused only for an
  app holding at least its fair share of that backlog, so one app's burst does not shut the
  others out;
- `peer`: one peer address has `FOLIOT_PEER_MAX_REQUESTS` requests (of any kind) under way
  (refused by `foliot/http/edge.py` for every route);
- `mailbox`: one run's mailbox stayed full past `FOLIOT_MAILBOX_WAIT_MS` (counted here,
  decided by the supervisor);
- `latency`: a standing queue: for a whole `FOLIOT_ADMISSION_INTERVAL_MS` no start or signal was
  answered within `FOLIOT_ADMISSION_TARGET_MS`; then only as many are served at once as keep
  their queueing delay near that target (`gate.LatencyGate`), the others are refused at once.
  A signal that queued behind other messages of its own run is not timed by the gate: one
  busy run is per-run back-pressure (its bounded mailbox, `mailbox` above), not a sign that
  the engine cannot keep up, and must not make every other run's callers wait or be refused.
  With `FOLIOT_ADMISSION_LAG_MS` set, the same gate sheds while the event loop runs that late
  (`watch_lag`): the process then reads its sockets late, so requests wait before any admission
  sees them (`gate.py`). The lag is measured (and shown in `/metrics`) either way.

A start or signal counts as work (in flight, and timed by the gate) only once its caller is
authenticated and its body has been read (`Ticket.begin`, called by the routes): a request
whose body is slow or never comes, or that is refused for its credentials, holds none of the
capacity the other apps' work needs (issue 20: 64 connections sending only a head had filled
the gate's burst and shed every app). Such requests are bounded elsewhere: per peer
(`FOLIOT_PEER_MAX_REQUESTS`, foliot/http/edge.py) and by the body timeout.

The counters are plain attributes for `/metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import trio

from ..core.config import Settings
from ..core.errors import Overloaded
from .gate import LatencyGate
from .lanes import Lanes

if TYPE_CHECKING:
    from .dispatcher import Dispatcher

REASONS = ("inflight", "latency", "storage", "push_backlog", "mailbox", "peer")


class Ticket:
    """One start or signal let past the checks; it counts as work from `begin` (authenticated,
    body read) until answered. `timed` is cleared when its wait says nothing about the engine
    as a whole (it queued behind its own run's messages)."""

    __slots__ = ("_admission", "started", "timed")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.timed = True
        self.started: float | None = None

    def begin(self) -> None:
        """The caller is authenticated and its body read: from now on it is work in flight."""
        if self.started is None:
            self.started = trio.current_time()
            self._admission.inflight += 1
            self._admission.admitted += 1


class Admission:
    def __init__(self, settings: Settings, dispatcher: Dispatcher, store: Any) -> None:
        self.max_inflight = settings.max_inflight_requests
        self.push_backlog_max = settings.push_backlog_max
        self.storage_queue_max = settings.storage_queue_max
        self._dispatcher = dispatcher
        self._store = store
        self.inflight = 0  # starts and signals being served now
        self.admitted = 0
        self.behind_own_run = 0  # admitted signals not timed by the gate (queued behind their run)
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.gate = LatencyGate(
            settings.admission_target_ms / 1000,
            settings.admission_interval_ms / 1000,
            lag_s=settings.admission_lag_ms / 1000,
        )
        self._traffic = trio.Event()  # set by a start or signal; `watch_lag` probes while set
        self._last_call = 0.0  # Trio time of the last start or signal seen
        self.lag_probes = 0  # wake-ups of `watch_lag` so far
        # Work that enters without a caller (a schedule's fire) waits in its app's lane.
        self.lanes = Lanes(settings.app_internal_rate, settings.app_internal_burst)
        # Child runs of an app's fan-outs (run, map, parallel steps) share one more lane.
        self.child_lanes = Lanes(settings.app_child_rate, settings.app_child_burst)

    def _seen(self, now: float) -> None:
        self._last_call = now
        if not self._traffic.is_set():
            self._traffic.set()

    async def watch_lag(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """While starts or signals arrive, sleep a quarter of the gate's interval at a time and
        tell the gate how late each wake-up came: a late loop is a process that reads its
        sockets late. Parked while no start or signal came for `window` intervals, so an idle
        node (or a test under a mock clock) has no periodic wake-up."""
        gate = self.gate
        task_status.started()
        if not gate.enabled:
            return
        period = gate.interval_s / 4
        idle_after = gate.interval_s * gate.window
        while True:
            await self._traffic.wait()
            due = trio.current_time() + period
            gate.expect(due)
            await trio.sleep_until(due)
            now = trio.current_time()
            self.lag_probes += 1
            gate.lagged(now, now - due)
            if now - self._last_call > idle_after:
                self._traffic = trio.Event()

    @property
    def storage_queue(self) -> int:
        """Units of work waiting for the storage writer (0 for a store without a queue)."""
        return int(getattr(self._store, "pending_writes", 0))

    def refuse(self, reason: str, message: str, retry_after: int = 1) -> Overloaded:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        return Overloaded(message, reason=reason, retry_after=retry_after)

    def shed(self) -> Overloaded | None:
        """The latency gate's refusal of one more start or signal now (None: admitted)."""
        now = trio.current_time()
        self._seen(now)
        return None if self.gate.admit_queued(now, self.inflight) else self._shed_refusal()

    def _shed_refusal(self) -> Overloaded:
        return self.refuse(
            "latency",
            f"starts and signals wait over {self.gate.target_s * 1000:g} ms to be served; retry shortly",
        )

    def check(self, app: str) -> None:
        """Raise `Overloaded` if a new start or signal for `app` should be refused now."""
        if self.inflight >= self.max_inflight:
            self._seen(trio.current_time())
            raise self.refuse(
                "inflight", f"{self.inflight} starts and signals are being served; retry shortly"
            )
        depth = self.storage_queue
        if depth >= self.storage_queue_max:
            raise self.refuse("storage", f"{depth} writes are waiting for storage; retry shortly")
        refusal = self.shed()
        if refusal is not None:
            raise refusal
        backlog = self._dispatcher.backlog
        if backlog >= self.push_backlog_max:
            mine = self._dispatcher.app_backlog(app)
            if mine * max(1, self._dispatcher.apps_waiting) >= backlog:
                raise self.refuse(
                    "push_backlog",
                    f"{backlog} task pushes are waiting to be sent ({mine} for this app); retry shortly",
                    retry_after=2,
                )

    @contextmanager
    def admit(self, app: str) -> Iterator[Ticket]:
        """Check, then (from `Ticket.begin`) count the request as in flight until it has been
        answered; its latency feeds the gate unless the ticket says it queued behind its own run."""
        self.check(app)
        ticket = Ticket(self)
        try:
            yield ticket
        finally:
            started = ticket.started
            if started is not None:
                self.inflight -= 1
                now = trio.current_time()
                self.gate.answered(now, now - started if ticket.timed else None)
                if not ticket.timed:
                    self.behind_own_run += 1
