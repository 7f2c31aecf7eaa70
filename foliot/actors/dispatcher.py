"""Pushes tasks to handlers over HTTP: signed, bounded by deadline and sync cap, classified.

Foliot's only outbound sender: task pushes, and `Call`s (an SWF Lambda invocation) beside them
under the same caps. Pushes wait in a queue Foliot owns, one FIFO per app,
and a fixed set of `FOLIOT_PUSH_CONCURRENCY` senders takes them from a ready-queue of apps
served round-robin, at most `FOLIOT_PUSH_CONCURRENCY_PER_APP` in flight per app, so one app's
burst cannot starve another and no request ever waits inside httpx's connection pool (the pool
is sized to the senders). A push's deadline is counted from when it is sent: it goes out in the
body and the `foliot-deadline` header, bounds the HTTP call (with `FOLIOT_SYNC_TASK_MAX_MS`),
and comes back on a 202 (`Accepted.deadline`) so the machine arms the durable deadline timer.
`abort(token)` drops a queued push or cancels one in flight. Redirects are never followed.

Flow control (issue 23): within an app, pushes are taken by aged priority (`flow.rank`: a push
gains one level per `aging` seconds it waits, so nothing queued more than `4 * aging` seconds
after it goes ahead); across apps, the ready-queue is a weighted round-robin: an app at the head
gives up to its `weight` pushes (the admin's `PUT /apps/{app}` `weight`, 1 by default) before it
goes to the back, so a push queued for an app is taken after at most the sum of the other
ready apps' weights of other pushes, whatever their backlogs. A push of a rate-limited step or
app takes a token of each bucket (`ratelimit.RateLimiter`) when a sender is about to send it,
and only then: one whose bucket is not free leaves the sender holding nothing and waits in its
bucket's line (this node's sends waiting for that bucket, in order; only the first is timed, in
`delayed`, for the bucket's next free instant), and comes back at the head of its app's queue
when its turn comes; its deadline counts from when it is then sent. A send dropped while it
waits (its task closed, its partition gone) just leaves its line: no token was taken for it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import httpx
import trio
from trio.lowlevel import ParkingLot

from .. import signing
from ..core.errors import StorageError
from ..core.logs import log_push
from ..core.tracing import NO_TRACER, Tracer, push_span_id
from ..core.workflow.definition import HandlerPathError, push_url
from ..core.workflow.duration import format_timestamp
from ..core.workflow.flow import AGING_SECONDS, DEFAULT_PRIORITY, Bucket, rank
from ..core.workflow.machine import (
    Accepted,
    Failed,
    Outcome,
    TaskAnswer,
    classify_response,
    connection_failure,
    timeout_failure,
)
from ..core.workflow.model import Run, TaskRef
from ..core.workflow.payload import compact_json
from .pushclient import Poster, PushError, post
from .ratelimit import RateLimiter

log = logging.getLogger("foliot.dispatcher")

MAX_TAKE = 256  # at most this many tokens of a fast bucket taken in one statement


@attrs.frozen
class Target:
    """Where and how an app's tasks are pushed."""

    handler_base_url: str
    secrets: tuple[str, ...]  # live signing secrets, newest first
    weight: int = 1  # the app's share of the senders' turns (weighted round-robin)
    rate: Bucket | None = None  # the app's own rate limit, every push takes a token of it


def task_body(run: Run, task: TaskRef, deadline: int | None = None) -> dict[str, Any]:
    """The push body (also what a poller receives). A push passes its send-time deadline."""
    return {
        "taskToken": task.token,
        "app": run.app,
        "runId": run.run_id,
        "workflowName": run.workflow,
        "workflowVersion": run.version,
        "step": task.step,
        "attempt": task.attempt,
        "generation": task.generation,
        "idempotencyKey": task.idempotency_key(run.run_id),
        "deadline": format_timestamp(deadline if deadline is not None else task.deadline),
        "businessKey": run.business_key,
        "input": run.input,
        "state": run.state,
        "error": run.carried_error.to_json() if run.carried_error is not None else None,
    }


def traceparent(run: Run, task: TaskRef) -> str:
    """The run's trace, and the push attempt's span (`task.push`) as the handler's parent."""
    return f"00-{run.trace_id}-{push_span_id(run, task)}-01"


@attrs.define(eq=False)
class Push:
    """One queued or in-flight push: references to documents the run's actor already holds
    (the body is built only when it is sent), so a queued push costs about 100 bytes."""

    run: Run
    task: TaskRef
    path: str
    timeout_ms: int
    scope: trio.CancelScope | None = None  # set when a sender takes it
    dropped: bool = False  # aborted while queued; skipped when reached
    priority: int = DEFAULT_PRIORITY
    buckets: tuple[Bucket, ...] = ()  # the step's rate-limit bucket (the app's comes with Target)
    taken: bool = False  # its rate-limit tokens are taken: it goes now
    rank: float = 0.0  # aged priority order (`flow.rank`), set when queued
    seq: int = 0
    due: int | None = None  # set by `_gate`: it waits for a token (a line's first: woken then)
    waits_on: str | None = None  # the bucket's label it waits for (for `why`)
    wait_for: Bucket | None = None  # set with `due`: the bucket whose line it is to wait in
    line: str | None = None  # the bucket whose line it waits in, or was let out of to take a token
    since: int | None = None  # epoch ms when it first waited for a token
    timer: int = -1  # the seq of its live entry in the dispatcher's `delayed` heap

    @property
    def app(self) -> str:
        return self.run.app

    @property
    def token(self) -> str:
        return self.task.token

    @property
    def owner(self) -> str:
        """The actor the push is for (its run)."""
        return self.run.run_id


@attrs.define(eq=False)
class Call:
    """An outbound call other than a task push (an SWF Lambda invocation): queued and sent by
    the same senders under the same caps, fair among `app`s; `send` makes the call and reports
    its outcome itself. A call whose token is queued or in flight is not queued twice."""

    app: str
    token: str
    send: Callable[[], Awaitable[None]]
    owner: str = ""  # the actor the call is for (an SWF execution's actor id)
    scope: trio.CancelScope | None = None
    dropped: bool = False
    priority: int = DEFAULT_PRIORITY
    buckets: tuple[Bucket, ...] = ()  # a gated pull offer: its step's rate-limit bucket
    taken: bool = False
    rank: float = 0.0
    seq: int = 0
    due: int | None = None
    waits_on: str | None = None
    wait_for: Bucket | None = None
    line: str | None = None
    since: int | None = None
    timer: int = -1


@attrs.define(eq=False)
class _Line:
    """One node's sends waiting for a rate-limit bucket, in order. Only the first is timed (for
    the bucket's next free instant); when it is let out to take the token (`out`), the others
    wait until it took it, waits again, or was dropped."""

    bucket: Bucket
    items: deque[Push | Call] = attrs.Factory(deque)
    out: Push | Call | None = None


class _AppLane:
    """One app's queued pushes: those back from a rate-limit wait first (`front`), then a band
    per priority level in arrival order, the band head of the smallest aged rank next. Dropped
    items are skipped when reached."""

    __slots__ = ("bands", "front")

    def __init__(self) -> None:
        self.front: deque[Push | Call] = deque()
        self.bands: dict[int, deque[Push | Call]] = {}

    def __bool__(self) -> bool:
        return bool(self.front or self.bands)

    def add(self, item: Push | Call, front: bool = False) -> None:
        if front:
            self.front.append(item)
        else:
            self.bands.setdefault(item.priority, deque()).append(item)

    def pop(self) -> Push | Call | None:
        while self.front:
            item = self.front.popleft()
            if not item.dropped:
                return item
        bands = self.bands
        while bands:
            if len(bands) == 1:
                level = next(iter(bands))
            else:
                level = min(bands, key=lambda b: (bands[b][0].rank, bands[b][0].seq))
            band = bands[level]
            item = band.popleft()
            if not band:
                del bands[level]
            if not item.dropped:
                return item
        return None


class PushMeter(Protocol):
    """What the dispatcher counts (`foliot.observe.metrics.Metrics` is one)."""

    def push_done(self, outcome: Outcome, seconds: float) -> str:
        """Count a push's outcome and its latency; the outcome's label, for the log line."""
        ...

    def pushed(self) -> None:
        """One push was sent."""
        ...


class Dispatcher:
    def __init__(
        self,
        client: httpx.AsyncClient | Poster,
        *,
        now: Callable[[], int],
        target: Callable[[str], Awaitable[Target]],
        answer: Callable[[str, TaskAnswer], None],
        sync_cap_ms: int,
        max_body: int,
        concurrency: int = 64,
        per_app: int | None = None,
        current: Callable[[str], Run | None] = lambda run_id: None,
        metrics: PushMeter,
        limiter: RateLimiter | None = None,
        aging: float = AGING_SECONDS,
        rate_delay: Callable[[float], None] = lambda seconds: None,
        tracer: Tracer = NO_TRACER,
        may_send: Callable[[str], bool] = lambda owner: True,
    ) -> None:
        self._client = client
        self._may_send = may_send  # is the owner's actor still this node's (its lease trusted)
        self._tracer = tracer  # a `task.push` span per push sent
        self._limiter = limiter
        self.aging = aging
        self._rate_delay = rate_delay  # observes each reservation's wait (seconds)
        self._seq = itertools.count()
        self._weights: dict[str, int] = {}  # apps whose weight is not 1, as last resolved
        self._turn: dict[str, int] = {}  # pushes the app at the head gave in its current turn
        self._delayed: list[tuple[int, int, Push | Call]] = []  # (due ms, seq, line's first) heap
        self._held: dict[str, Push | Call] = {}  # token -> waiting for a rate-limit token
        self._lines: dict[str, _Line] = {}  # bucket -> this node's sends waiting for it
        self._delay_changed = ParkingLot()
        self._now = now
        self._target = target
        self._answer = answer
        self._current = current
        self._sync_cap_ms = sync_cap_ms
        self._max_body = max_body
        self.concurrency = max(1, concurrency)
        self.per_app = max(1, min(per_app or self.concurrency, self.concurrency))
        self._fifo: dict[str, _AppLane] = {}  # app -> its queued pushes
        self._ready: deque[str] = deque()  # apps with queued pushes and room, round-robin
        self._in_ready: set[str] = set()
        self._queued: dict[str, Push | Call] = {}  # token -> waiting for a sender
        self._sending: dict[str, Push | Call] = {}  # token -> being sent
        self._app_queued: dict[str, int] = {}
        self._app_sending: dict[str, int] = {}
        self._idle = ParkingLot()
        self.metrics = metrics
        self._backlogged = ParkingLot()  # the pacer sleeps here while nothing is queued
        self.limit = min(4, self.concurrency)  # senders allowed to send now: slow start (`_pace`)
        self.loop_lag_ms = 0
        self.max_inflight = 0  # high-water mark of pushes in flight at once

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(self.concurrency):
                nursery.start_soon(self._sender, name=f"foliot-push-sender-{i}")
            nursery.start_soon(self._pace, name="foliot-push-pacer")
            nursery.start_soon(self._release_delayed, name="foliot-push-rate-delays")
            task_status.started()

    # ------------------------------------------------------------------ introspection

    @property
    def inflight(self) -> int:
        return len(self._sending)

    @property
    def backlog(self) -> int:
        """Pushes waiting for a sender."""
        return len(self._queued)

    def app_backlog(self, app: str) -> int:
        return self._app_queued.get(app, 0)

    @property
    def apps_waiting(self) -> int:
        """Apps with at least one queued push."""
        return len(self._app_queued)

    def is_inflight(self, token: str) -> bool:
        return token in self._sending

    def is_queued(self, token: str) -> bool:
        return token in self._queued

    @property
    def delayed(self) -> int:
        """Pushes (and gated offers) waiting for a rate-limit slot."""
        return len(self._held)

    def delayed_until(self, token: str) -> tuple[str, int] | None:
        """(the bucket's label, epoch ms of its estimated slot) while `token` waits for a rate
        limit: the bucket's next free instant, one interval more per send ahead of it here."""
        item = self._held.get(token)
        line = self._lines.get(item.line or "") if item is not None else None
        if item is None or line is None:
            return None
        ahead = line.items.index(item) + (line.out is not None)  # O(n): for `why` only
        free = max(self._now(), self._limiter.free_at(line.bucket.name) if self._limiter else 0)
        if not ahead and item.due is not None:
            free = max(free, item.due)
        return line.bucket.label, free + -(-ahead * line.bucket.interval_us // 1000)

    def weight(self, app: str) -> int:
        return self._weights.get(app, 1)

    def set_weight(self, app: str, weight: int) -> None:
        """The app's share of the senders' turns (also learnt from each `Target` resolved)."""
        if weight == 1:
            self._weights.pop(app, None)
        else:
            self._weights[app] = weight

    # ------------------------------------------------------------------ queueing

    def push(
        self,
        run: Run,
        task: TaskRef,
        path: str,
        timeout_ms: int,
        priority: int = DEFAULT_PRIORITY,
        buckets: tuple[Bucket, ...] = (),
    ) -> None:
        """Queue a push (synchronous: called right after the attempt was committed)."""
        self._enqueue(Push(run, task, path, timeout_ms, priority=priority, buckets=buckets))

    def call(self, item: Call) -> None:
        """Queue a call (see `Call`)."""
        self._enqueue(item)

    def _enqueue(self, item: Push | Call, front: bool = False) -> None:
        token = item.token
        if token in self._queued or token in self._sending or token in self._held:
            return
        app = item.app
        if not front:
            item.seq = next(self._seq)
            item.rank = rank(item.priority, trio.current_time(), self.aging)
        self._queued[token] = item
        self._app_queued[app] = self._app_queued.get(app, 0) + 1
        lane = self._fifo.get(app)
        if lane is None:
            lane = self._fifo[app] = _AppLane()
        lane.add(item, front)
        self._make_ready(app)
        self._idle.unpark()
        self._backlogged.unpark_all()

    def abort(self, token: str) -> None:
        """The task was closed: drop the push if queued, cancel it if in flight."""
        item = self._queued.pop(token, None)
        if item is not None:
            item.dropped = True
            self._uncount_queued(item.app)
            self._leave_line(item)  # let out of its line, it took no token: the next may go
            return
        item = self._held.pop(token, None)
        if item is not None:
            item.dropped = True  # its heap entry (if first of its line) is skipped when it surfaces
            line = self._lines[item.line or ""]
            first = line.items[0] is item
            line.items.remove(item)
            if first and line.out is None:
                self._next_of(line)
            return
        item = self._sending.pop(token, None)  # its sender is freed once the cancel lands
        if item is not None:
            item.dropped = True
            if item.scope is not None:
                item.scope.cancel()

    def abort_where(self, which: Callable[[str], bool]) -> None:
        """Abort the pushes of the runs `which` picks (their partition left this node; the next
        owner sends their open attempts again, with the same idempotency keys)."""
        for token in [t for t, item in self._queued.items() if which(item.owner)]:
            self.abort(token)
        for token in [t for t, item in self._sending.items() if which(item.owner)]:
            self.abort(token)
        for token in [t for t, item in self._held.items() if which(item.owner)]:
            self.abort(token)

    def _uncount_queued(self, app: str) -> None:
        left = self._app_queued[app] - 1
        if left:
            self._app_queued[app] = left
        else:
            del self._app_queued[app]

    def app_cap(self) -> int:
        """The pushes one app may have in flight now: FOLIOT_PUSH_CONCURRENCY_PER_APP's share of
        the senders allowed now (`limit`, which the pacer shrinks while the loop lags), so the
        senders it keeps for other apps shrink with the limit instead of vanishing (with 48 of
        64 and the limit at 4, an app gets 3 and the fourth stays free for the others)."""
        if self.per_app >= self.concurrency:
            return self.per_app
        return max(1, self.limit * self.per_app // self.concurrency)

    def _make_ready(self, app: str) -> None:
        """Put the app in the ready-queue if it has pushes and room: at the head while its
        round-robin turn goes on, else at the back."""
        if app not in self._in_ready and app in self._fifo and self._app_sending.get(app, 0) < self.app_cap():
            if app in self._turn:
                self._ready.appendleft(app)
            else:
                self._ready.append(app)
            self._in_ready.add(app)

    def _next(self) -> Push | Call | None:
        """The next push to send: the app at the head of the ready-queue gives its next (aged
        priority order), and stays at the head until it gave `weight` pushes in this turn, then
        goes to the back of the queue if it still has pushes and room under its cap."""
        while self._ready:
            app = self._ready.popleft()
            self._in_ready.discard(app)
            fifo = self._fifo.get(app)
            item = fifo.pop() if fifo is not None else None
            if fifo is not None and not fifo:
                del self._fifo[app]
            if item is None:
                self._turn.pop(app, None)
                continue
            token = item.token
            del self._queued[token]
            self._uncount_queued(app)
            self._sending[token] = item
            self._app_sending[app] = self._app_sending.get(app, 0) + 1
            self.max_inflight = max(self.max_inflight, len(self._sending))
            item.scope = trio.CancelScope()
            used = self._turn.get(app, 0) + 1
            if (
                used < self._weights.get(app, 1)
                and app in self._fifo
                and self._app_sending[app] < self.app_cap()
            ):
                self._turn[app] = used  # its turn goes on: it stays at the head
                self._ready.appendleft(app)
                self._in_ready.add(app)
            elif used < self._weights.get(app, 1) and app in self._fifo:
                self._turn[app] = used  # at its cap: its turn goes on when a push of it ends
            else:
                self._turn.pop(app, None)
                self._make_ready(app)
            return item
        return None

    def _finished(self, item: Push | Call) -> None:
        app = item.app
        if self._sending.get(item.token) is item:
            del self._sending[item.token]
        left = self._app_sending[app] - 1
        if left:
            self._app_sending[app] = left
        else:
            del self._app_sending[app]
        self._make_ready(app)

    async def _pace(self, tick: float = 0.1) -> None:
        """While pushes queue, keep the event loop responsive: a push's time in flight includes
        the loop's own latency, which must not eat the handler's deadline. When the loop lags
        (> 100 ms late on a 100 ms sleep) the senders allowed to send shrink by a third, down to
        4; while it keeps up they grow one per tick up to FOLIOT_PUSH_CONCURRENCY (starting
        from 4, as TCP's slow start does, so a storm's first wave cannot swamp the loop)."""
        floor = min(4, self.concurrency)
        while True:
            if not self._queued:
                await self._backlogged.park()
                continue
            start = trio.current_time()
            await trio.sleep(tick)
            lag = trio.current_time() - start - tick
            self.loop_lag_ms = int(lag * 1000)
            if lag > 0.1:
                self.limit = max(floor, self.limit * 2 // 3)
            elif lag < 0.02 and self.limit < self.concurrency:
                self.limit += 1
                for app in list(self._fifo):  # an app held at its cap may have room again
                    self._make_ready(app)
                self._idle.unpark()

    async def _sender(self) -> None:
        while True:
            item = self._next() if len(self._sending) < self.limit else None
            if item is None:
                await self._idle.park()
                continue
            try:
                await self._deliver(item)
            finally:
                if item.due is None or item.dropped:
                    self._leave_line(item)  # sent, failed or dropped: the next of its line may go
                self._finished(item)
            if item.due is not None and not item.dropped:
                self._hold(item)

    # ------------------------------------------------------------------ rate limits

    async def _gate(self, item: Push | Call, app_rate: Bucket | None) -> bool:
        """Take the item's rate-limit tokens, as it is about to be sent (once); True when it
        must wait (it is then held, see `_hold`, holding no token), False when it may go now.
        A send not let out of a line waits behind this node's sends already waiting for any
        of its buckets."""
        if item.taken or self._limiter is None:
            return False
        buckets = item.buckets if app_rate is None else (*item.buckets, app_rate)
        if not buckets:
            return False
        now = self._now()
        if item.line is None:
            ahead = next((b for b in buckets if b.name in self._lines), None)
            if ahead is not None:
                item.due, item.waits_on, item.wait_for = now, ahead.label, ahead
                item.since = now if item.since is None else item.since
                return True
        line = self._lines.get(item.line) if item.line is not None else None
        granted, due, busy = await self._limiter.take(buckets, 1 + self._alike(item, line, MAX_TAKE - 1))
        now = self._now()
        if busy is None:
            item.taken = True
            # A bucket faster than one a millisecond gives the tokens of this millisecond at
            # once: to the sends next in the item's line that need the same buckets.
            followers: list[Push | Call] = []
            line = self._lines.get(item.line) if item.line is not None else None
            while line is not None and len(followers) < granted - 1 and self._alike(item, line, 1):
                follower = line.items.popleft()
                del self._held[follower.token]
                follower.taken, follower.due, follower.line = True, None, None
                followers.append(follower)
            self._leave_line(item)
            for sent in (item, *followers):
                self._rate_delay(max(0, now - (sent.since if sent.since is not None else now)) / 1000)
            for follower in followers:
                self._enqueue(follower, front=True)
            return False
        if busy.name != item.line:
            self._leave_line(item)
        item.due, item.waits_on, item.wait_for = due, busy.label, busy
        item.since = now if item.since is None else item.since
        return True

    @staticmethod
    def _alike(item: Push | Call, line: _Line | None, most: int) -> int:
        """How many of the first `most` sends of `line` need the same buckets as `item`."""
        if line is None:
            return 0
        n = 0
        for other in itertools.islice(line.items, most):
            if other.app != item.app or other.buckets != item.buckets:
                break
            n += 1
        return n

    def _hold(self, item: Push | Call) -> None:
        """The item left its sender to wait for a token: at the head of the line it was let out
        of (it is still first), else at the end of its bucket's line."""
        assert item.due is not None and item.wait_for is not None
        bucket = item.wait_for
        self._held[item.token] = item
        line = self._lines.get(bucket.name)
        if line is None:
            line = self._lines[bucket.name] = _Line(bucket)
        if item.line == bucket.name and line.out is item:
            line.out = None
            line.items.appendleft(item)
        else:
            item.line = bucket.name
            line.items.append(item)
        if line.out is None and line.items[0] is item:
            self._time(item)

    def _time(self, item: Push | Call) -> None:
        """Wake the first of a line at its `due`."""
        assert item.due is not None
        item.timer = next(self._seq)
        heapq.heappush(self._delayed, (item.due, item.timer, item))
        self._delay_changed.unpark_all()

    def _next_of(self, line: _Line) -> None:
        """The first of the line went (or left): time the next, else forget the line."""
        if line.items:
            first = line.items[0]
            first.due = max(self._now(), self._limiter.free_at(line.bucket.name) if self._limiter else 0)
            self._time(first)
        else:
            del self._lines[line.bucket.name]

    def _leave_line(self, item: Push | Call) -> None:
        """The item was let out of its line and will not wait in it again (it took its token,
        waits for another bucket, or was dropped): the next of the line may go."""
        name, item.line = item.line, None
        line = self._lines.get(name) if name is not None else None
        if line is not None and line.out is item:
            line.out = None
            self._next_of(line)

    def _live(self, entry: tuple[int, int, Push | Call]) -> bool:
        _, timer, item = entry
        line = self._lines.get(item.line or "")
        return (
            not item.dropped
            and item.timer == timer
            and line is not None
            and line.out is None
            and bool(line.items)
            and line.items[0] is item
        )

    async def _release_delayed(self) -> None:
        """Let the first of each line out to take its token when its bucket may be free: back
        at the head of its app's queue (the rest of the line waits for it)."""
        while True:
            heap = self._delayed
            while heap and not self._live(heap[0]):
                heapq.heappop(heap)
            if not heap:
                await self._delay_changed.park()
                continue
            wait = (heap[0][0] - self._now()) / 1000
            if wait > 0:
                with trio.move_on_after(wait):
                    await self._delay_changed.park()
                continue
            _, _, item = heapq.heappop(heap)
            line = self._lines[item.line or ""]
            line.items.popleft()
            line.out = item
            del self._held[item.token]
            item.due = None
            self._enqueue(item, front=True)

    # ------------------------------------------------------------------ sending

    async def _deliver(self, item: Push | Call) -> None:
        """Send one push and tell the run's actor the outcome (unless it was aborted)."""
        assert item.scope is not None
        if isinstance(item, Call):
            with item.scope:
                try:
                    if await self._gate(item, None):
                        return
                    await item.send()
                except Exception:  # never let one call take a sender down
                    log.exception("outbound call %s failed unexpectedly", item.token)
            return
        outcome: Outcome | None = None
        started = trio.current_time()
        with item.scope:
            try:
                outcome = await self._attempt(item)
                if outcome is None:
                    return  # held for its rate-limit slot, or dropped: not sent
            except Exception as exc:  # never let one push take a sender down
                log.exception("push of %s failed unexpectedly", item.task.idempotency_key(item.run.run_id))
                outcome = connection_failure(f"dispatch error: {type(exc).__name__}")
        if item.scope.cancelled_caught or outcome is None:
            return  # aborted: the task was closed by an intervention
        seconds = trio.current_time() - started
        log_push(item.run, item.task, outcome, seconds, self.metrics.push_done(outcome, seconds))
        self._answer(item.run.run_id, TaskAnswer(item.task.token, outcome))

    def _document(self, item: Push) -> Run:
        """The run as its actor holds it now (a state edit while queued is sent), else as queued."""
        current = self._current(item.run.run_id)
        if current is not None and current.task is not None and current.task.token == item.task.token:
            return current
        return item.run

    async def _resolve(self, item: Push) -> Target | None:
        """The app's URL and secrets; while storage is down, wait (the push has not happened),
        up to one step timeout, then give the attempt back as a timeout."""
        give_up = self._now() + item.timeout_ms
        delay = 0.2
        while True:
            try:
                return await self._target(item.app)
            except StorageError:
                if self._now() + delay * 1000 >= give_up:
                    return None
                await trio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _attempt(self, item: Push) -> Outcome | None:
        """Send the push; None when it must first wait for a rate-limit slot (held)."""
        target = await self._resolve(item)
        if target is None:
            return timeout_failure("storage was unavailable for the step's whole timeout")
        self.set_weight(item.app, target.weight)
        try:
            url = push_url(target.handler_base_url, item.path)
        except HandlerPathError as exc:  # before its token: a push that cannot go takes none
            return Failed("invalid_handler", f"handler path {item.path[:200]!r} {exc}", False)
        if await self._gate(item, target.rate):
            return None
        if not self._may_send(item.owner):
            # Its partition left this node (or its lease is no longer trusted) while the push
            # waited for its target: the next owner sends it, with the same idempotency key.
            item.dropped = True
            return None
        run, task = self._document(item), item.task
        sent_at = self._now()
        deadline = sent_at + item.timeout_ms  # counted from now, never from when it was queued
        body = compact_json(task_body(run, task, deadline))
        headers = {
            "content-type": "application/json",
            "foliot-signature": signing.sign(body, target.secrets, sent_at // 1000),
            "foliot-deadline": format_timestamp(deadline) or "",
            "foliot-task-token": task.token,
            "foliot-app": run.app,
            "traceparent": traceparent(run, task),
            "user-agent": "foliot",
        }
        budget_ms = min(item.timeout_ms, self._sync_cap_ms)
        self.metrics.pushed()
        with self._tracer.span("task.push", run, push_span_id(run, task)) as span:
            outcome = await self._post(url, body, headers, budget_ms, task.step)
            span.set("foliot.attempt", task.attempt)
            span.set("foliot.outcome", "timeout" if outcome is None else type(outcome).__name__.lower())
            if isinstance(outcome, Failed):
                span.set("foliot.error", outcome.cls)
        if outcome is None:
            if budget_ms < item.timeout_ms:
                return timeout_failure("the synchronous attempt passed FOLIOT_SYNC_TASK_MAX_MS")
            return timeout_failure()
        if isinstance(outcome, Accepted):
            return Accepted(deadline)
        return outcome

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], budget_ms: int, step: str
    ) -> Outcome | None:
        """The HTTP call itself, bounded by `budget_ms`; None when the budget ran out."""
        with trio.move_on_after(budget_ms / 1000):
            try:
                answer = await post(self._client, url, body, headers, self._max_body)
            except PushError as exc:
                return connection_failure(str(exc)[:500])
            if answer.body is None and 200 <= answer.status < 300 and answer.status != 202:
                return Failed(
                    "output_too_large",
                    f"the output of step {step!r} is over {self._max_body} bytes",
                    False,
                )
            # A failure (or a 202) whose body is too large to read is classified by its status
            # alone: its body is no output, and a big error page must not stop the retries.
            return classify_response(answer.status, answer.body or b"", answer.next_step)
        return None
