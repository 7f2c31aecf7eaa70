"""The run kind (`foliot.kinds.run`: `Runs` and its `RunKind`) against a fake host and store.

No node, no SQL, no HTTP: `Runs` is built on a `KindHost` of this file whose store is a few
dicts with the constraints the real stores enforce (the run row guarded by `seq`, one open run
per business key, one live record per Idempotency-Key, a signalId taken once) and whose
dispatcher and queues note what the store held when each effect happened. The runtime under
the kind is the real one (supervisor, timer wheel), so the run's own path is exercised:
transition, commit, then effects, then the answer. The point is the order: an effect is only
ever seen after the store recorded the commit, and a commit that raises leaves no effect.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import attrs
import pytest
import trio
from cryptography.fernet import Fernet
from trio.testing import MockClock

from foliot.actors.admission import Admission
from foliot.actors.clock import Clock
from foliot.actors.directory import Directory
from foliot.actors.messages import Envelope
from foliot.actors.placement import LOCAL, Where
from foliot.actors.queues import Queues
from foliot.actors.runtime import Kind
from foliot.actors.supervisor import Supervisor
from foliot.actors.timer_wheel import TimerWheel
from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.core.errors import (
    DOUBT,
    CommitInDoubt,
    Conflict,
    NotFound,
    StorageUnavailable,
    Unavailable,
)
from foliot.core.views import run_view
from foliot.core.workflow import machine
from foliot.core.workflow.model import Run, TaskRef
from foliot.http.errors import status_of
from foliot.kinds.run.service import Runs

from ..helpers import advance
from ..sim.store import APP, T0, FakeStore

T = TypeVar("T")

ORDER = {
    "name": "order",
    "steps": [{"name": "pay", "type": "wait", "signal": "paid"}, {"name": "ship", "type": "task"}],
}
CHARGE = {"name": "charge", "steps": [{"name": "charge", "type": "task"}]}
PICK = {"name": "pick", "steps": [{"name": "pick", "type": "task", "queue": "warehouse"}]}
NAP = {"name": "nap", "steps": [{"name": "nap", "type": "sleep", "duration": "1h"}]}
BLINK = {"name": "blink", "steps": [{"name": "blink", "type": "sleep", "duration": "10s"}]}
DOZE = {
    "name": "doze",
    "steps": [
        {"name": "go", "type": "wait", "signal": "go"},
        {"name": "doze", "type": "sleep", "duration": "5m"},
    ],
}
ASK_S = 600  # no answer within this (virtual) time is a hang: fail rather than wait forever


# ---------------------------------------------------------------------- effects, noting the store


class FakeDispatcher:
    """Pushes are noted with what the store held at that moment."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.pushes: list[tuple[str, str, str, bool]] = []  # (run id, token, path, stored first)
        self.aborted: list[str] = []

    def push(
        self, run: Run, task: TaskRef, path: str, timeout_ms: int, priority: int = 3, buckets: Any = ()
    ) -> None:
        self.pushes.append((run.run_id, task.token, path, self.store.holds(run.run_id, task.token)))

    def abort(self, token: str) -> None:
        self.aborted.append(token)

    def is_inflight(self, token: str) -> bool:
        return False


class NotingQueues(Queues):
    """The real pull queues, noting with each offer whether the store held the task."""

    def __init__(self, store: FakeStore) -> None:
        super().__init__()
        self.store = store
        self.offers: list[tuple[str, str, bool]] = []  # (run id, token, stored first)

    def offer(self, app: str, queue: str, token: str, run_id: str, priority: int = 0) -> None:
        self.offers.append((run_id, token, self.store.holds(run_id, token)))
        super().offer(app, queue, token, run_id, priority)


class Everywhere:
    def where(self, actor_id: str) -> Where:
        return LOCAL


# ---------------------------------------------------------------------- the fake KindHost


class FakeKindHost:
    """A `KindHost` of one node that owns everything; the runtime's parts are the real ones."""

    def __init__(self, settings: Settings, store: FakeStore) -> None:
        self.settings = settings
        self.clock = Clock(T0)
        self.store = store
        self.vault = Vault(Fernet.generate_key().decode())
        self.directory = Directory(store, self.clock, self.vault)  # type: ignore[arg-type]
        self.dispatcher = FakeDispatcher(store)
        self.queues = NotingQueues(store)
        self.supervisor = Supervisor(self)
        self.timers = TimerWheel(store, self.clock, self._deliver_timer)
        self.admission = Admission(settings, self.dispatcher, store)  # type: ignore[arg-type]
        self.placement = Everywhere()
        self.http: Any = None
        self.pull = None
        self.ready = True
        self.ids = (f"run_{i:04d}" for i in itertools.count(1))
        self.kinds: dict[str, Kind[Any]] = {}
        self.nursery: trio.Nursery | None = None
        self.retried: list[tuple[float, str]] = []

    def accepts(self, actor_id: str) -> bool:
        return True

    def elsewhere(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> bool:
        raise AssertionError("a single node owns every run")

    def later(self, delay_s: float, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        self.retried.append((delay_s, actor_id))
        self.spawn(lambda: self._again(delay_s, kind, actor_id, envelope))

    async def _again(self, delay_s: float, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        await trio.sleep(delay_s)
        self.tell_or_retry(kind, actor_id, envelope)

    def fences(self, *actor_ids: str) -> None:
        return None

    def new_id(self, make: Callable[[], str], key: Callable[[str], str] | None = None) -> str:
        return next(self.ids)

    async def shielded(self, write: Callable[[], Awaitable[T]]) -> T:
        with trio.CancelScope(shield=True):
            return await write()

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> bool:
        assert self.nursery is not None
        self.nursery.start_soon(fn)
        return True

    async def outlive_caller(self, fn: Callable[[], Awaitable[T]]) -> T:
        return await fn()

    def tell_or_retry(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        if not self.supervisor.tell(kind, actor_id, envelope):
            self.later(0.1, kind, actor_id, envelope)

    def _deliver_timer(self, actor_kind: str, actor_id: str, slot: str, kind: str, key: str) -> bool:
        target = self.kinds[actor_kind]
        return self.supervisor.tell(target, actor_id, Envelope(target.firing(slot, kind, key)))


@attrs.define
class Rig:
    host: FakeKindHost
    store: FakeStore
    runs: Runs

    async def start(self, workflow: str, **kw: Any) -> tuple[dict[str, Any], bool]:
        with trio.fail_after(ASK_S):
            return await self._start(workflow, **kw)

    async def _start(self, workflow: str, **kw: Any) -> tuple[dict[str, Any], bool]:
        return await self.runs.start(
            app=APP,
            workflow=workflow,
            version=kw.get("version"),
            input=kw.get("input"),
            business_key=kw.get("business_key"),
            run_timeout_ms=None,
            idempotency_key=kw.get("idempotency_key"),
            request_hash=kw.get("request_hash", ""),
            render=run_view,
        )

    async def signal(self, run_id: str, name: str, signal_id: str | None = None) -> machine.Reply:
        reply, _ = await self.ask(run_id, machine.SignalIn(name, {"n": 1}, signal_id))
        return reply

    async def ask(
        self, run_id: str, message: machine.Message, known: Run | None = None
    ) -> tuple[machine.Reply, Run | None]:
        with trio.fail_after(ASK_S):
            return await self.runs.ask(run_id, message, known)


@pytest.fixture
async def rig(autojump_clock: MockClock) -> AsyncIterator[Rig]:
    store = FakeStore()
    for definition in (ORDER, CHARGE, PICK, NAP, BLINK, DOZE):
        store.add_workflow(definition)
    host = FakeKindHost(Settings(), store)
    # `KindHost` types `store` as the whole `Store` protocol and `dispatcher` as the concrete
    # class: the fakes hold only what the run kind calls, so they are not that type.
    runs = Runs(host)  # type: ignore[arg-type]
    host.kinds[runs.kind.name] = runs.kind
    async with trio.open_nursery() as nursery:
        host.nursery = nursery
        await nursery.start(host.supervisor.serve)
        await nursery.start(host.timers.serve)
        yield Rig(host, store, runs)
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------- starts


async def test_a_start_commits_the_new_run_then_pushes_its_task(rig: Rig, autojump_clock: MockClock) -> None:
    body, created = await rig.start("charge", input={"amount": 5})
    run_id = body["runId"]
    assert created and body["status"] == "running" and body["input"] == {"amount": 5}
    [unit] = rig.store.commits
    assert unit.expected_seq is None and unit.run.run_id == run_id and len(unit.tasks) == 1
    token = unit.tasks[0].token
    assert rig.host.dispatcher.pushes == [(run_id, token, "/foliot/charge/charge", True)]
    # The actor holds the document it just committed: no read of the run was needed.
    assert rig.runs.live(run_id) == unit.run and rig.store.get_run_calls == 0


async def test_a_start_whose_commit_fails_has_no_effect(rig: Rig, autojump_clock: MockClock) -> None:
    rig.store.fail_commits = 1
    with pytest.raises(StorageUnavailable):  # the HTTP layer answers it 503 (see test_faces_fake_service)
        await rig.start("charge")
    assert len(rig.store.refused) == 1 and rig.store.commits == [] and rig.store.runs == {}
    assert rig.host.dispatcher.pushes == [] and rig.host.supervisor.actors == {}
    _, created = await rig.start("charge")  # storage is back: a new start goes through
    assert created and [p[3] for p in rig.host.dispatcher.pushes] == [True]


async def test_a_start_of_an_unknown_workflow_or_version_writes_nothing(
    rig: Rig, autojump_clock: MockClock
) -> None:
    with pytest.raises(NotFound, match="workflow 'nope' not found"):
        await rig.start("nope")
    with pytest.raises(NotFound, match="version 2 of workflow 'charge'"):
        await rig.start("charge", version=2)
    assert rig.store.commits == rig.store.refused == [] and rig.host.dispatcher.pushes == []


async def test_a_start_refuses_with_503_until_the_node_is_ready(rig: Rig, autojump_clock: MockClock) -> None:
    rig.host.ready = False
    with pytest.raises(Unavailable) as refused:
        await rig.start("charge")
    assert status_of(refused.value) == 503 and rig.store.refused == rig.store.commits == []


async def test_an_idempotent_start_replays_its_first_answer_and_commits_once(
    rig: Rig, autojump_clock: MockClock
) -> None:
    first, created = await rig.start("charge", idempotency_key="k1", request_hash="h1")
    again, created_again = await rig.start("charge", idempotency_key="k1", request_hash="h1")
    assert created and not created_again and again == first
    assert len(rig.store.commits) == 1 and len(rig.host.dispatcher.pushes) == 1
    assert json.loads(rig.store.idempotency[(APP, "k1")].response) == first
    with pytest.raises(Conflict) as reused:
        await rig.start("charge", idempotency_key="k1", request_hash="another body")
    assert reused.value.code == "idempotency_key_reused"
    assert len(rig.store.commits) == 1 and len(rig.host.dispatcher.pushes) == 1


async def test_a_business_key_in_use_is_refused_by_the_store_and_named(
    rig: Rig, autojump_clock: MockClock
) -> None:
    first, _ = await rig.start("order", business_key="o-1")
    with pytest.raises(Conflict) as in_use:
        await rig.start("order", business_key="o-1")
    assert in_use.value.code == "business_key_in_use" and in_use.value.extra == {"runId": first["runId"]}
    assert len(rig.store.commits) == 1 and len(rig.store.refused) == 1
    assert list(rig.host.supervisor.actors) == [first["runId"]]  # the refused run never got an actor


# ---------------------------------------------------------------------- signals


async def test_a_signal_commits_the_step_then_pushes_the_next_task(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    run_id = body["runId"]
    assert body["status"] == "waiting" and rig.host.dispatcher.pushes == []
    reply = await rig.signal(run_id, "paid", signal_id="s-1")
    assert reply == machine.Ok("delivered")
    start, signal = rig.store.commits
    assert signal.expected_seq == start.run.seq and signal.signal_ids == ("s-1",)
    assert signal.run.current_step == "ship" and rig.store.runs[run_id] == signal.run
    [(pushed_run, token, path, stored_first)] = rig.host.dispatcher.pushes
    assert (pushed_run, path, stored_first) == (run_id, "/foliot/order/ship", True)
    assert token == signal.tasks[0].token


async def test_a_signal_whose_commit_fails_answers_503_and_has_no_effect(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    run_id = body["runId"]
    rig.store.fail_commits = 1
    with pytest.raises(Unavailable) as refused:
        await rig.signal(run_id, "paid", signal_id="s-1")
    assert status_of(refused.value) == 503
    assert len(rig.store.refused) == 1 and len(rig.store.commits) == 1
    assert rig.store.runs[run_id].status == "waiting" and rig.host.dispatcher.pushes == []
    assert rig.runs.live(run_id) == rig.store.runs[run_id]  # the actor kept the stored document
    assert rig.host.retried == []  # the caller was told: nothing retried behind its back
    assert await rig.signal(run_id, "paid", signal_id="s-1") == machine.Ok("delivered")
    assert [p[3] for p in rig.host.dispatcher.pushes] == [True]


async def test_a_signal_id_taken_before_is_a_duplicate_the_store_refuses(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    run_id = body["runId"]
    assert await rig.signal(run_id, "paid", signal_id="s-1") == machine.Ok("delivered")
    # The run now works on `ship`: a retry would be buffered, but the store has the id.
    assert await rig.signal(run_id, "paid", signal_id="s-1") == machine.Ok("duplicate")
    assert len(rig.store.commits) == 2 and len(rig.store.refused) == 1
    assert rig.store.runs[run_id].buffer == () and len(rig.host.dispatcher.pushes) == 1
    assert await rig.signal(run_id, "paid", signal_id="s-2") == machine.Ok("buffered")
    assert len(rig.store.runs[run_id].buffer) == 1


async def test_a_passivated_run_is_read_from_the_store_and_a_stale_write_reread(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    run_id = body["runId"]
    await advance(61)  # past FOLIOT_PASSIVATE_AFTER_MS: a waiting run leaves memory
    assert rig.runs.live(run_id) is None and rig.store.get_run_calls == 0
    stored = rig.store.runs[run_id]
    assert await rig.runs.document(run_id) == stored and rig.store.get_run_calls == 1
    # Handed a stale copy (as a route may be): the guarded write fails, the run is reread.
    stale = attrs.evolve(stored, seq=stored.seq - 1)
    reply, run = await rig.ask(run_id, machine.SignalIn("paid", None, None), stale)
    assert reply == machine.Ok("delivered") and run is not None and run.current_step == "ship"
    [refused] = rig.store.refused
    assert refused.expected_seq == stale.seq  # refused by the guard, then retried on the reread run
    assert rig.store.get_run_calls == 2 and len(rig.store.commits) == 2


# ---------------------------------------------------------------------- queues and timers


async def test_a_queued_task_is_offered_after_its_commit_and_claimed_through_the_actor(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("pick")
    run_id = body["runId"]
    [(offered_run, token, stored_first)] = rig.host.queues.offers
    assert (offered_run, stored_first) == (run_id, True) and rig.host.dispatcher.pushes == []
    with trio.fail_after(ASK_S):
        claimed = await rig.runs.claim_queued(APP, "warehouse", 5, trio.current_time() + 1, "w-1")
    [(run, task)] = claimed
    assert task.token == token and task.claimed_by == "w-1" and run.run_id == run_id
    claim = rig.store.commits[-1]
    assert claim.run.task is not None and claim.run.task.claimed_by == "w-1"
    assert rig.host.queues.depth(APP, "warehouse") == 0


async def test_a_short_sleep_is_armed_in_the_wheel_by_the_commit_and_fires(
    rig: Rig, autojump_clock: MockClock
) -> None:
    """Inside the wheel's window the stored row is never read again: the kind's `sync` after
    the commit is what arms it."""
    body, _ = await rig.start("blink")
    run_id = body["runId"]
    [(slot, armed)] = rig.store.runs[run_id].timers()
    assert rig.host.timers.pending_for(run_id, [slot])[0]["key"] == armed.key
    await advance(11)
    assert rig.store.runs[run_id].status == "completed"
    assert rig.host.timers.pending_for(run_id, [slot]) == []


async def test_a_sleep_fires_through_the_wheel_from_the_stored_run(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("nap")
    run_id = body["runId"]
    assert body["status"] == "sleeping"
    [(slot, armed)] = rig.store.runs[run_id].timers()
    # An hour is beyond the wheel's 60 s window: only the stored row holds it for now.
    assert rig.host.timers.pending_for(run_id, [slot]) == []
    await advance(3_599)
    assert rig.host.timers.pending_for(run_id, [slot])[0]["key"] == armed.key  # paged in
    assert rig.store.runs[run_id].status == "sleeping"
    await advance(2)
    assert rig.store.runs[run_id].status == "completed" and len(rig.store.commits) == 2


# ---------------------------------------------------------------------- commits whose reply was lost
# Found by the simulation (tests/sim, seeds 1 and 3): a commit can be written and still fail (the
# connection lost during it). The run was then left without its effects (a start's first push, a
# signal's next task, a timer) until the next restart, its caller told "nothing was changed".


async def test_a_start_written_with_its_reply_lost_goes_on_as_committed(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.lose_replies = 1
    body, created = await rig.start("charge")
    [unit] = rig.store.commits
    assert created and body["runId"] == unit.run.run_id and rig.runs.live(unit.run.run_id) == unit.run
    assert rig.host.dispatcher.pushes == [
        (unit.run.run_id, unit.tasks[0].token, "/foliot/charge/charge", True)
    ]


async def test_a_signal_written_with_its_reply_lost_is_delivered_with_its_effects(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    run_id = body["runId"]
    rig.store.lose_replies = 1
    assert await rig.signal(run_id, "paid", signal_id="s-1") == machine.Ok("delivered")
    signal = rig.store.commits[-1]
    assert rig.host.dispatcher.pushes == [(run_id, signal.tasks[0].token, "/foliot/order/ship", True)]
    assert rig.runs.live(run_id) == rig.store.runs[run_id] and rig.host.retried == []


async def test_a_failed_commit_read_back_unchanged_changed_nothing(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    rig.store.fail_commits = 1
    with pytest.raises(Unavailable, match="nothing was changed"):
        await rig.signal(body["runId"], "paid", signal_id="s-1")
    assert rig.store.get_run_calls == 1 and rig.host.retried == []  # read back: not written


async def test_a_signal_in_doubt_says_so_and_its_effects_follow_once_the_run_is_read(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("order")
    run_id = body["runId"]
    rig.store.lose_replies, rig.store.fail_reads = 1, 1  # written, and the read back fails too
    with pytest.raises(Unavailable) as doubt:
        await rig.signal(run_id, "paid", signal_id="s-1")
    assert doubt.value.args[0] == DOUBT and rig.host.dispatcher.pushes == []
    await advance(2)  # the run is read again (a `Resolve`): the commit was written
    signal = rig.store.commits[-1]
    assert rig.host.dispatcher.pushes == [(run_id, signal.tasks[0].token, "/foliot/order/ship", True)]
    assert rig.runs.live(run_id) == rig.store.runs[run_id]
    assert await rig.signal(run_id, "paid", signal_id="s-1") == machine.Ok("duplicate")  # the retry


async def test_a_start_in_doubt_is_adopted_once_its_run_is_read(rig: Rig, autojump_clock: MockClock) -> None:
    rig.store.lose_replies, rig.store.fail_reads = 1, 1
    with pytest.raises(CommitInDoubt):  # the HTTP layer answers it 503 with `DOUBT`
        await rig.start("charge")
    [unit] = rig.store.commits
    assert rig.host.dispatcher.pushes == [] and rig.runs.live(unit.run.run_id) is None
    await advance(2)
    assert rig.host.dispatcher.pushes == [
        (unit.run.run_id, unit.tasks[0].token, "/foliot/charge/charge", True)
    ]
    assert rig.runs.live(unit.run.run_id) == rig.store.runs[unit.run.run_id]


# Found by the simulation (tests/sim, seed 40057): a caller's copy of a passivated run seeds its
# actor (`Supervisor.ask`); when that message committed nothing (refused, a no-op, or storage
# failed), the actor kept the copy, stale or not, and the run's next timer was judged against it:
# found stale, settled, never fired again.


async def _kept_busy_past_its_sleep(rig: Rig, run_id: str) -> None:
    """Messages that commit nothing (heartbeats for no task) every 30 s: the actor stays live."""
    for _ in range(12):
        await advance(30)
        reply, _ = await rig.ask(run_id, machine.Heartbeat("tt_none"))
        assert isinstance(reply, machine.Rejected)


async def test_a_copy_no_commit_confirmed_is_read_again_before_the_next_message(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("doze")
    run_id = body["runId"]
    stale = rig.store.runs[run_id]  # waiting at `go`
    assert await rig.signal(run_id, "go") == machine.Ok("delivered")
    await advance(61)  # sleeping (5 min, beyond the wheel's window): passivated
    assert rig.runs.live(run_id) is None and rig.store.runs[run_id].status == "sleeping"
    reply, _ = await rig.ask(run_id, machine.Heartbeat("tt_none"), stale)  # refused: nothing committed
    assert isinstance(reply, machine.Rejected) and reply.code == "task_closed"
    assert rig.runs.live(run_id) is None  # the copy was not kept
    await _kept_busy_past_its_sleep(rig, run_id)
    assert rig.store.runs[run_id].status == "completed"


async def test_a_copy_whose_commit_failed_is_read_again_before_the_next_message(
    rig: Rig, autojump_clock: MockClock
) -> None:
    body, _ = await rig.start("doze")
    run_id = body["runId"]
    stale = rig.store.runs[run_id]
    assert await rig.signal(run_id, "go") == machine.Ok("delivered")
    await advance(61)
    rig.store.fail_commits = 1  # read back: not written (the store holds a later document)
    with pytest.raises(Unavailable, match="nothing was changed"):
        await rig.ask(run_id, machine.SignalIn("go", None, "s-2"), stale)
    await _kept_busy_past_its_sleep(rig, run_id)
    assert rig.store.runs[run_id].status == "completed"
