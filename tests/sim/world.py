"""The simulated world: one Foliot node, its store, its handlers and its clients, all in memory.

`World(seed)` runs the real `foliot.node.Node` (supervisor, run actors, timer wheel,
dispatcher, pull queues, recovery) under `trio.testing.MockClock(autojump_threshold=0)`, on:

- a **store** (`store.FakeStore`) reached through a `Connection` that fails by the seed: a read
  or a commit raises `StorageUnavailable`, a commit is refused as a `StaleWrite` it was not, a
  commit is *applied and then* raises (the reply was lost), commits are slow, and the database
  goes away for a while (an outage: everything fails);
- a **network** (`Network`, a `pushclient.Poster`) standing in for the app's handlers: a push is
  answered, answered twice (the answer and a `complete` call), answered after the attempt timed
  out (a late `complete`), accepted (202) and completed later (or never), answered 5xx or 4xx,
  refused before it reached the handler, delivered twice, or its answer lost;
- **crashes**: at seeded times, and right after a commit was applied (between the commit and
  its effects), the node is torn down at once (its connection and network severed, its tasks
  cancelled, its callers left without an answer; a commit it had in flight applied or not) and
  a new node is started on the same store after a while, recovering from its durable state as a
  restart does, its wall clock perhaps stepped forward or back.

Everything random is drawn from generators seeded by the seed (the faults', the handlers', the
workload's, and Trio's own scheduling order), ids and tokens are counters, and time is virtual:
a seed replays exactly. The workload (`workload.py`) drives the node through the same entry
points the HTTP routes call; the checker (`checker.py`) reads the store and the logs kept here.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import trio

from foliot.actors.clock import Clock
from foliot.actors.pushclient import Answer, PushError
from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.core.errors import FoliotError, Refused, StaleWrite, StorageError, StorageUnavailable
from foliot.http.errors import status_of
from foliot.node import Node
from foliot.storage.base import CommitObserver, UnitOfWork

from .store import APP, T0, FakeStore

log = logging.getLogger("foliot.sim")

HANDLER_URL = "http://handler.sim"
# Fernet key fixed so that a seed replays byte for byte (signatures included).
SECRET_KEY = "kRkK7d5m5f0Jx2bq0k7bX9U3pC3d4a0Vq1yQy8n3r5g="
SIGNING_SECRET = "whsec_simulation"


# ---------------------------------------------------------------------- what a seed draws


@attrs.frozen
class Profile:
    """How hostile this seed's world is, and how its node is configured (drawn from the seed)."""

    read_fail: float  # a read raises StorageUnavailable
    commit_fail: float  # a commit raises StorageUnavailable, not applied
    commit_lost: float  # a commit is applied, then raises StorageUnavailable (reply lost)
    commit_stale: float  # a commit is refused with a StaleWrite it does not deserve
    commit_slow: float  # a commit takes 0.5 to 5 s
    crash_after_commit: float  # the node dies right after a commit was applied
    outages: tuple[tuple[int, int], ...]  # (start, end) ms of virtual time: the database is away
    crashes: tuple[int, ...]  # ms of virtual time at which the node dies
    downtime_ms: tuple[int, int]  # how long a dead node stays down (a range)
    clock_steps: int  # a restarted node's wall clock is off by up to this much (ms), either way
    push: tuple[tuple[str, float], ...]  # handler behaviours and their weights
    settings: Settings

    @classmethod
    def draw(cls, seed: int, span_ms: int) -> Profile:
        rng = random.Random(f"{seed}:profile")
        calm = rng.random() < 0.15  # some seeds have no storage faults at all
        rate = 0.0 if calm else rng.choice((0.01, 0.03, 0.08))

        def windows(n: int, longest: int) -> tuple[tuple[int, int], ...]:
            out = []
            for _ in range(n):
                start = rng.randrange(span_ms)
                out.append((start, start + rng.randrange(200, longest)))
            return tuple(sorted(out))

        push = (
            ("ok", 10.0),
            ("twice", rng.choice((0.0, 1.0))),
            ("late", rng.choice((0.0, 0.5, 1.0))),
            ("accepted", rng.choice((0.0, 1.0, 2.0))),
            ("5xx", rng.choice((0.0, 1.0, 2.0))),
            ("4xx", rng.choice((0.0, 0.3))),
            ("refused", rng.choice((0.0, 0.5))),
            ("duplicate", rng.choice((0.0, 0.5))),
            ("lost", rng.choice((0.0, 1.0))),
        )
        settings = attrs.evolve(
            Settings(),
            secret_key=SECRET_KEY,
            passivate_after_ms=rng.choice((300, 5_000, 60_000)),
            mailbox_size=rng.choice((2, 8, 64)),
            mailbox_wait_ms=rng.choice((100, 1_000)),
            timer_window_ms=rng.choice((10_000, 60_000)),
            timer_max_inflight=rng.choice((1, 4, 256)),
            push_concurrency=rng.choice((1, 4, 16)),
            push_concurrency_per_app=rng.choice((1, 4, 16)),
            trend_interval_ms=0,
            admission_target_ms=0,
            shutdown_grace_ms=2_000,
        )
        return cls(
            read_fail=rate / 2,
            commit_fail=rate,
            commit_lost=0.0 if calm else rng.choice((0.0, 0.02, 0.05)),
            commit_stale=0.0 if calm else rng.choice((0.0, 0.02)),
            commit_slow=rng.choice((0.0, 0.02, 0.1)),
            crash_after_commit=0.0 if calm else rng.choice((0.0, 0.01, 0.03)),
            outages=() if calm else windows(rng.choice((0, 1, 2)), 30_000),
            crashes=tuple(sorted(rng.randrange(span_ms) for _ in range(rng.choice((0, 1, 2, 3))))),
            downtime_ms=(100, rng.choice((1_000, 20_000))),
            clock_steps=rng.choice((0, 0, 30_000, 600_000)),
            push=push,
            settings=settings,
        )


# ---------------------------------------------------------------------- what is logged


@attrs.define
class Call:
    """One client call: its invocation and its outcome (`ok`, `refused`: definitely not done,
    `unknown`: no answer, or a 5xx), for the checker and the printed history."""

    op: int  # the workload operation it belongs to (-1: a handler's or a worker's call)
    kind: str
    args: dict[str, Any]
    at: int
    outcome: str = "pending"
    value: Any = None
    done: int | None = None

    def line(self) -> str:
        args = " ".join(f"{k}={v}" for k, v in self.args.items() if v is not None)
        value = self.value if not isinstance(self.value, dict) else _brief(self.value)
        return f"{self.at - T0:>9} {self.kind:<9} {args} -> {self.outcome} {value}"


def _brief(body: dict[str, Any]) -> str:
    return " ".join(f"{k}={body[k]}" for k in ("runId", "status", "created") if k in body)


@attrs.frozen
class Delivery:
    """A task attempt reaching a handler (a push) or a worker (a claim)."""

    at: int
    via: str  # push | claim
    token: str
    key: str
    run_id: str
    step: str
    attempt: int
    generation: int
    stored_first: bool  # the store held the attempt open when it was delivered
    incarnation: int


# ---------------------------------------------------------------------- the store, faulty


_READS = frozenset(
    {
        "get_run",
        "get_workflow",
        "get_idempotency",
        "find_open_run",
        "signal_taken",
        "timers_due_before",
        "get_task",
        "open_tasks",
        "children_of",
        "child_links",
        "parent_fans",
        "get_runs",
        "queued_keys",
        "queue_heads",
        "queue_room",
        "get_app",
        "list_signing_secrets",
        "get_app_flow",
        "count_open_runs",
        "prune_idempotency",
        "prune_closed_runs",
        "swf_prune_closed",
        "swf_open_executions",
        "swf_owed_executions",
    }
)


class Connection:
    """One node's connection to the store: fails by the seed, severed when the node dies."""

    def __init__(self, world: World, incarnation: int) -> None:
        self.world = world
        self.store = world.store
        self.incarnation = incarnation
        self.alive = True
        self.in_flight: list[UnitOfWork] = []  # commits sent, not answered yet
        self._observer: CommitObserver | None = None

    def observe_commits(self, observer: CommitObserver | None) -> None:
        self._observer = observer

    # The per-app limits' reads (issue 37) draw no fault and take no checkpoint, so the seeds'
    # schedules stay what they were before them (the defects below are found by seed).
    async def get_app_limits(self, app: str) -> dict[str, int | float]:
        return self.store.app_limits(app)

    async def open_runs_of(self, app: str) -> int:
        return self.store.open_runs(app)

    def __getattr__(self, name: str) -> Any:
        if name not in _READS:
            raise AttributeError(name)
        method = getattr(self.store, name)

        async def read(*args: Any) -> Any:
            await self._fault("read", self.world.profile.read_fail)
            return await method(*args)

        return read

    async def _fault(self, what: str, rate: float) -> None:
        world = self.world
        await trio.lowlevel.checkpoint()
        if not self.alive:
            raise StorageUnavailable("connection lost: the node is down")
        if world.outage():
            world.count(f"{what}_outage")
            raise StorageUnavailable("the database is unreachable (an outage)")
        if world.faulty(rate):
            world.count(f"{what}_failed")
            raise StorageUnavailable(f"the database failed the {what}")

    async def commit(self, unit: UnitOfWork) -> bool:
        observer = self._observer
        started = observer.commit_started() if observer is not None else 0.0
        committed = False
        try:
            written = await self._commit(unit)
            committed = True
            return written
        finally:
            if observer is not None:
                observer.commit_ended(unit, started, committed)

    def sever(self) -> None:
        """The node died: nothing more reaches the store. A commit it had in flight may have
        reached the database already (its COMMIT sent): half of them are applied, now."""
        self.alive = False
        for unit in self.in_flight:
            if self.world.faulty(0.5):
                try:
                    written = self.store.apply(unit)
                except StorageError:
                    continue
                self.world.count("commit_orphaned")
                # Its slot admission refused, what landed is its `otherwise` (the run queued):
                # logged as the unit, the checker saw one more run holding the slot (seed 17172).
                self.world.committed(unit if written or unit.otherwise is None else unit.otherwise)
        self.in_flight.clear()

    async def _commit(self, unit: UnitOfWork) -> bool:
        world = self.world
        profile = world.profile
        slow = world.faulty(profile.commit_slow)
        self.in_flight.append(unit)
        try:
            await trio.sleep(world.faults.uniform(0.5, 5.0) if slow else world.faults.uniform(0.0005, 0.005))
        finally:
            if unit in self.in_flight:
                self.in_flight.remove(unit)
        await self._fault("commit", profile.commit_fail)
        if unit.expected_seq is not None and world.faulty(profile.commit_stale):
            world.count("commit_stale")
            raise StaleWrite(f"run {unit.run.run_id}: refused as stale (injected)")
        # StaleWrite, UniqueViolation: refused, nothing written; False: `unit.otherwise` written.
        written = self.store.apply(unit)
        world.committed(unit if written or unit.otherwise is None else unit.otherwise)
        if world.faulty(profile.commit_lost):
            world.count("commit_lost")
            raise StorageUnavailable("the commit's reply was lost (it was applied)")
        if world.faulty(profile.crash_after_commit):
            world.crash("right after a commit was applied")
            raise StorageUnavailable("connection lost: the node is down")
        return written


# ---------------------------------------------------------------------- the handlers


class Network:
    """The node's way to its app's handlers (`pushclient.Poster`): each push meets a handler
    behaviour drawn from the seed. The handlers outlive the node: their later calls (a late
    `complete`, an accepted task's answer) go to whichever node is up then."""

    def __init__(self, world: World, incarnation: int) -> None:
        self.world = world
        self.incarnation = incarnation
        self.alive = True

    async def post(self, url: str, body: bytes, headers: dict[str, str], max_body: int) -> Answer:
        world = self.world
        await trio.lowlevel.checkpoint()
        if not self.alive:
            raise PushError("ConnectError: the node is down")
        doc = json.loads(body)
        behaviour = world.push_behaviour()
        world.count(f"push_{behaviour}")
        if behaviour == "refused":
            raise PushError("ConnectError: connection refused")
        token = doc["taskToken"]
        output = {"step": doc["step"], "key": doc["idempotencyKey"]}
        world.deliver("push", doc, self.incarnation)
        if behaviour == "duplicate":
            world.deliver("push", doc, self.incarnation)  # the network delivered it twice
        await trio.sleep(world.handlers.uniform(0.001, 0.2))
        if behaviour in ("ok", "duplicate"):
            return Answer(200, json.dumps(output).encode(), None)
        if behaviour == "twice":  # the answer, and the same answer through `complete`
            world.later(world.handlers.uniform(0.0, 2.0), lambda: world.complete(token, output))
            return Answer(200, json.dumps(output).encode(), None)
        if behaviour == "5xx":
            return Answer(503, b"", None)
        if behaviour == "4xx":
            error = {"error": {"class": "rejected", "message": "no", "retryable": False}}
            return Answer(422, json.dumps(error).encode(), None)
        if behaviour == "lost":
            raise PushError("ReadError: the connection was reset before the answer")
        if behaviour == "accepted":
            world.later(0.0, lambda: world.accepted(token, output))
            return Answer(202, b"", None)
        assert behaviour == "late"
        world.later(world.handlers.uniform(5.0, 40.0), lambda: world.complete(token, output))
        await trio.sleep_forever()  # the push's own deadline ends it
        raise AssertionError  # pragma: no cover


# ---------------------------------------------------------------------- one node's life


class Incarnation:
    """One start of the node: its `Node`, its connection and network, its callers."""

    def __init__(self, world: World, number: int) -> None:
        self.world = world
        self.number = number
        self.connection = Connection(world, number)
        self.network = Network(world, number)
        self.node = Node(
            world.profile.settings,
            self.connection,  # type: ignore[arg-type]  # the reads and the commit the node makes
            clock=Clock(world.now() + world.skew(number)),
            vault=world.vault,
            http_client=self.network,
        )
        self.node.runs.new_run_id = world.new_run_id
        self.node.runs.new_token = world.new_token
        self.scope = trio.CancelScope()
        self.calls: set[trio.CancelScope] = set()

    def kill(self) -> None:
        self.connection.sever()
        self.network.alive = False
        for scope in self.calls:
            scope.cancel()
        self.scope.cancel()


# ---------------------------------------------------------------------- the world


def _flat(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _flat(inner)]
    return [exc]


def _storage_only(exc: BaseException) -> bool:
    return all(isinstance(leaf, StorageError) for leaf in _flat(exc))


def _leaves(exc: BaseException) -> str:
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in _flat(exc))


class Unanswered(Exception):
    """A call got no answer: the node died under it, or it was never up."""


class World:
    def __init__(self, seed: int, span_ms: int = 120_000) -> None:
        self.seed = seed
        self.span_ms = span_ms
        self.profile = Profile.draw(seed, span_ms)
        self.faults = random.Random(f"{seed}:faults")
        self.handlers = random.Random(f"{seed}:handlers")
        self.store = FakeStore()
        self.vault = Vault(SECRET_KEY)
        self.store.add_app(APP, HANDLER_URL, self.vault.encrypt(SIGNING_SECRET))
        self._run_ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self.calls: list[Call] = []
        self.deliveries: list[Delivery] = []
        self.units: list[tuple[int, UnitOfWork]] = []  # (at, unit) in commit order
        self.events: list[tuple[int, str]] = []  # crashes, restarts: for the printed history
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []  # what went wrong outside the checker (a crash, a hang)
        self.incarnation: Incarnation | None = None
        self.incarnations = 0
        self.ended = 0  # when the simulation ended (epoch ms of virtual time)
        self.calm = False  # the workload is over: no more faults, handlers answer at once
        self.up = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._died = trio.Event()

    # ------------------------------------------------------------------ randomness and time

    def now(self) -> int:
        return T0 + round(trio.current_time() * 1000)

    def faulty(self, rate: float) -> bool:
        return not self.calm and rate > 0 and self.faults.random() < rate

    def outage(self) -> bool:
        if self.calm:
            return False
        t = self.now() - T0
        return any(start <= t < end for start, end in self.profile.outages)

    def push_behaviour(self) -> str:
        if self.calm:
            return "ok"
        names = [name for name, _ in self.profile.push]
        weights = [weight for _, weight in self.profile.push]
        return self.handlers.choices(names, weights)[0]

    def skew(self, incarnation: int) -> int:
        """How far node `incarnation`'s wall clock is off (ms): the first one is right; a
        restarted one may have been stepped forward or back (NTP, a VM moved)."""
        steps = self.profile.clock_steps
        if incarnation == 1 or not steps or self.calm:
            return 0
        return self.faults.randrange(-steps, steps + 1)

    def new_run_id(self) -> str:
        return f"run_{next(self._run_ids):05d}"

    def new_token(self) -> str:
        return f"tt_{next(self._tokens):06d}"

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # ------------------------------------------------------------------ what happened

    def committed(self, unit: UnitOfWork) -> None:
        self.units.append((self.now(), unit))

    def deliver(self, via: str, doc: dict[str, Any], incarnation: int) -> None:
        run_id, token = doc["runId"], doc["taskToken"]
        self.deliveries.append(
            Delivery(
                self.now(),
                via,
                token,
                doc["idempotencyKey"],
                run_id,
                doc["step"],
                doc["attempt"],
                doc["generation"],
                self.store.holds(run_id, token),
                incarnation,
            )
        )

    # ------------------------------------------------------------------ the node's life

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the node, and start it again each time it dies, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._crasher)
            task_status.started()
            while True:
                self.incarnations += 1
                incarnation = Incarnation(self, self.incarnations)
                self._died = trio.Event()
                self.events.append((self.now(), f"node {incarnation.number} starting"))
                try:
                    with incarnation.scope:
                        async with trio.open_nursery() as inner:
                            await inner.start(incarnation.node.serve)
                            self.incarnation = incarnation
                            self.up.set()
                            self.events.append((self.now(), f"node {incarnation.number} ready"))
                            await trio.sleep_forever()
                except Exception as exc:
                    if self.incarnation is incarnation or not _storage_only(exc):
                        self.failures.append(f"node {incarnation.number} raised {_leaves(exc)}")
                        log.exception("the node raised")
                        incarnation.kill()
                        return
                    # Starting, it could not read the store: the process exits, and is started again.
                    self.events.append(
                        (self.now(), f"node {incarnation.number} failed to start: {_leaves(exc)}")
                    )
                    incarnation.kill()
                finally:
                    self.incarnation = None
                    self.up = trio.Event()
                if self.calm:
                    await trio.sleep(0.1)
                else:
                    low, high = self.profile.downtime_ms
                    await trio.sleep(self.faults.randrange(low, high) / 1000)

    def crash(self, why: str) -> None:
        """The node dies now: nothing more it does reaches the store, a handler or a caller."""
        incarnation = self.incarnation
        if incarnation is None:
            return
        self.count("crash")
        self.events.append((self.now(), f"node {incarnation.number} crashed ({why})"))
        self.incarnation = None
        self.up = trio.Event()
        incarnation.kill()

    async def _crasher(self) -> None:
        for at in self.profile.crashes:
            await trio.sleep_until(at / 1000)
            if not self.calm:
                self.crash("at a seeded time")

    def later(self, delay: float, work: Callable[[], Awaitable[None]]) -> None:
        """A handler's or a worker's own work, outside the node: it outlives a crash."""
        assert self._nursery is not None

        async def run() -> None:
            await trio.sleep(delay)
            await work()

        self._nursery.start_soon(run)

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn)

    # ------------------------------------------------------------------ calls into the node

    @contextmanager
    def _on_node(self, incarnation: Incarnation) -> Iterator[trio.CancelScope]:
        scope = trio.CancelScope()
        incarnation.calls.add(scope)
        try:
            with scope:
                yield scope
        finally:
            incarnation.calls.discard(scope)

    async def call(
        self, op: int, kind: str, args: dict[str, Any], fn: Callable[[Node], Awaitable[Any]], log: bool = True
    ) -> Call:
        """Make one call on the node that is up (as one HTTP request would), and log it (unless
        `log` is False and it answered nothing: an empty poll)."""
        call = Call(op, kind, args, self.now())
        try:
            return await self._call(call, fn)
        finally:
            if log or call.value:
                self.calls.append(call)

    async def _call(self, call: Call, fn: Callable[[Node], Awaitable[Any]]) -> Call:
        kind, args = call.kind, call.args
        incarnation = self.incarnation
        if incarnation is None or not incarnation.node.ready:
            call.outcome, call.value = "refused", "down"  # connection refused: nothing was done
            call.done = self.now()
            return call
        try:
            with self._on_node(incarnation) as scope, trio.fail_after(600):
                value = await fn(incarnation.node)
            if scope.cancelled_caught or not incarnation.connection.alive:
                raise Unanswered
            call.outcome, call.value = "ok", value
        except Unanswered:
            call.outcome, call.value = "unknown", "no answer"
        except trio.TooSlowError:
            call.outcome, call.value = "unknown", "hung"
            self.failures.append(f"{kind} {args} got no answer within 600 s")
        except Refused as exc:
            status = status_of(exc)
            code = getattr(exc, "code", None) or type(exc).__name__
            call.outcome = "unknown" if status >= 500 else "refused"
            call.value = f"{status} {code}"
        except StorageError as exc:  # the HTTP face answers it 503
            call.outcome, call.value = "unknown", f"503 {type(exc).__name__}"
        except FoliotError as exc:
            call.outcome, call.value = "unknown", f"500 {type(exc).__name__}: {exc}"
            self.failures.append(f"{kind} {args} raised {type(exc).__name__}: {exc}")
        if not incarnation.connection.alive:
            call.outcome, call.value = "unknown", "no answer"  # the node died before answering
        call.done = self.now()
        return call

    # ------------------------------------------------------------------ a handler's later calls

    async def complete(self, token: str, output: Any, tries: int = 3) -> None:
        """`POST /tasks/{token}/complete`, as a handler calls it (retried while unanswered)."""
        from .api import complete

        for _ in range(tries):
            call = await self.call(
                -1, "complete", {"token": token}, lambda node: complete(node, token, output)
            )
            if call.outcome != "unknown" and call.value != "down":
                return
            await trio.sleep(self.handlers.uniform(0.5, 5.0))

    async def accepted(self, token: str, output: Any) -> None:
        """A task its handler accepted (202): answered later, perhaps after heartbeats, twice,
        after its deadline, or never."""
        from .api import heartbeat

        what = self.handlers.choice(("soon", "soon", "heartbeats", "twice", "late", "never"))
        if what == "never":
            return
        if what == "heartbeats":
            for _ in range(self.handlers.randrange(1, 4)):
                await trio.sleep(self.handlers.uniform(1.0, 4.0))
                await self.call(-1, "heartbeat", {"token": token}, lambda node: heartbeat(node, token))
        await trio.sleep(self.handlers.uniform(0.1, 3.0) if what != "late" else self.handlers.uniform(5, 60))
        await self.complete(token, output)
        if what == "twice":
            await self.complete(token, output)
