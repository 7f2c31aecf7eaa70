"""The generic actor runtime driven by a tiny machine of its own (not a Foliot run).

A counter document: `Add` changes it, `Arm` arms a timer, the timer's firing adds one, `Close`
closes it, `Boom` is a bug. Its "store" is a dict that can refuse loads and commits, so every
path of the runtime (mailbox, passivation, rehydration, timers, storage failures, stale writes,
crashes) is shown without a Foliot run in sight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
from trio.testing import MockClock

from foliot.actors.messages import Envelope, ReplySlot
from foliot.actors.runtime import Actor
from foliot.core.errors import Internal, StaleWrite, StorageUnavailable, Unavailable

from .conftest import Env, advance
from .counter import Add, Arm, Boom, Busy, Close, Counter, Fire, Timer, transition


class CounterKind:
    """`Kind[Counter]` over a dict; commits are guarded by `version`."""

    name = "counter"

    def __init__(self) -> None:
        self.docs: dict[str, Counter] = {}
        self.loads = 0
        self.commits = 0
        self.fail_commits = 0  # commits to refuse with StorageUnavailable
        self.stale_commits = 0  # commits to refuse with StaleWrite
        self.firings: list[tuple[str, str]] = []
        self.gave_up: list[str] = []

    async def load(self, actor_id: str) -> Counter | None:
        await trio.lowlevel.checkpoint()
        self.loads += 1
        return self.docs.get(actor_id)

    async def handle(self, actor: Actor[Counter], envelope: Envelope) -> bool:
        state = actor.state
        assert state is not None
        msg = envelope.message
        if isinstance(msg, Fire):
            self.firings.append((actor.id, msg.key))
        new = transition(state, msg)
        if new != state:
            await trio.sleep(0.01)  # a commit takes time
            if self.stale_commits:
                self.stale_commits -= 1
                raise StaleWrite("moved")
            if self.fail_commits:
                self.fail_commits -= 1
                raise StorageUnavailable("down")
            if self.docs[actor.id].version != state.version:
                return True
            new = attrs.evolve(new, version=state.version + 1)
            self.docs[actor.id] = new
            self.commits += 1
            actor.state = new
            actor.host.timers.sync(self.name, actor.id, self.timers(state), self.timers(new))
        if envelope.reply is not None:
            envelope.reply.put(new.total)  # type: ignore[arg-type]
        return False

    def timers(self, state: Counter) -> Sequence[tuple[str, Timer]]:
        return [("tick", state.timer)] if state.timer is not None and state.open else []

    def firing(self, slot: str, kind: str, key: str) -> Fire:
        return Fire(slot, key)

    def fired(self, message: Any) -> tuple[str, str] | None:
        return (message.slot, message.key) if isinstance(message, Fire) else None

    def parked(self, state: Counter) -> bool:
        return not state.busy

    def is_open(self, state: Counter) -> bool:
        return state.open

    def unknown(self, actor_id: str) -> Any:
        return f"no counter {actor_id}"

    def persistent(self, message: Any) -> bool:
        return False

    async def give_up(self, actor: Actor[Counter], exc: Exception) -> None:
        self.gave_up.append(actor.id)
        self.docs[actor.id] = attrs.evolve(self.docs[actor.id], open=False)

    def describe(self, actor: Actor[Counter]) -> dict[str, Any]:
        return {"total": actor.state.total if actor.state is not None else None}


@pytest.fixture
async def counters(env: Env) -> CounterKind:
    kind = CounterKind()
    env.engine.kinds[kind.name] = kind  # type: ignore[assignment]
    return kind


class Probe:
    """Sends messages to counters the way routes and loops do."""

    def __init__(self, env: Env, kind: CounterKind) -> None:
        self.env = env
        self.kind = kind

    async def ask(self, actor_id: str, msg: Any) -> Any:
        slot = ReplySlot()
        await self.env.engine.supervisor.ask(self.kind, actor_id, Envelope(msg, slot))  # type: ignore[arg-type]
        return await slot.wait()

    def tell(self, actor_id: str, msg: Any) -> bool:
        return self.env.engine.supervisor.tell(self.kind, actor_id, Envelope(msg))  # type: ignore[arg-type]


@pytest.fixture
def probe(env: Env, counters: CounterKind) -> Probe:
    return Probe(env, counters)


async def test_messages_are_handled_one_at_a_time_in_order_and_answered_after_the_commit(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    assert all(probe.tell("ctr_a", Add(n)) for n in (1, 2, 3))
    assert await probe.ask("ctr_a", Add(10)) == 16
    assert counters.docs["ctr_a"].total == 16 and counters.commits == 4 and counters.loads == 1
    actor = env.engine.supervisor.actors["ctr_a"]
    assert actor.kind is counters and actor.processed == 4 and actor.mailbox is None and not actor.draining
    view = actor.describe()
    assert view["kind"] == "counter" and view["id"] == "ctr_a" and view["total"] == 16


@pytest.mark.parametrize("settings_overrides", [{"mailbox_size": 2}])
async def test_a_full_mailbox_refuses_a_tell_and_makes_an_ask_wait(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    assert probe.tell("ctr_a", Add(1))  # taken by the drain at once
    await trio.testing.wait_all_tasks_blocked()
    assert probe.tell("ctr_a", Add(1)) and probe.tell("ctr_a", Add(1))
    assert not probe.tell("ctr_a", Add(1))  # two queued: full
    assert await probe.ask("ctr_a", Add(1)) == 4  # waited for room, then went through


async def test_an_unknown_actor_answers_its_caller_and_leaves_memory(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    assert await probe.ask("ctr_none", Add(1)) == "no counter ctr_none"
    assert "ctr_none" not in env.engine.supervisor.actors


async def test_an_idle_parked_actor_is_passivated_and_rehydrated_on_the_next_message(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    counters.docs["ctr_b"] = Counter()
    await probe.ask("ctr_a", Add(1))
    await probe.ask("ctr_b", Busy(True))  # something in flight: never dropped
    await advance(env.engine.settings.passivate_after_ms / 1000 + 1)
    assert list(env.engine.supervisor.actors) == ["ctr_b"]
    assert await probe.ask("ctr_a", Add(1)) == 2  # rehydrated from the store
    assert counters.loads == 3
    await probe.ask("ctr_a", Close())
    assert "ctr_a" not in env.engine.supervisor.actors  # a closed actor leaves at once


async def test_a_timer_fires_once_through_the_wheel_even_across_passivation(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    due = env.engine.clock.now() + 3_600_000
    await probe.ask("ctr_a", Arm(due))
    await probe.ask("ctr_a", Arm(due + 1_000))  # re-armed: the first arming is superseded
    await advance(600)
    assert "ctr_a" not in env.engine.supervisor.actors  # passivated while it waits
    await advance(3_600)
    assert counters.firings == [("ctr_a", "tick#2")]
    assert counters.docs["ctr_a"].total == 1 and counters.docs["ctr_a"].timer is None
    assert (
        env.engine.timers.stats()["inflight"] == 0 and env.engine.timers.pending_for("ctr_a", ["tick"]) == []
    )
    await advance(86_400)
    assert counters.firings == [("ctr_a", "tick#2")]  # never again


async def test_a_firing_that_could_not_commit_is_handed_out_again(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    await probe.ask("ctr_a", Arm(env.engine.clock.now() + 1_000))
    counters.fail_commits = 2
    await advance(60)
    assert [key for _, key in counters.firings] == ["tick#1"] * 3
    assert counters.docs["ctr_a"].total == 1 and env.engine.timers.retried == 2


async def test_a_storage_failure_answers_unavailable_and_changes_nothing(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    counters.fail_commits = 1
    with pytest.raises(Unavailable):
        await probe.ask("ctr_a", Add(5))
    assert counters.docs["ctr_a"] == Counter()
    assert await probe.ask("ctr_a", Add(5)) == 5


async def test_a_stale_write_reloads_the_document_and_retries(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    await probe.ask("ctr_a", Add(1))
    counters.docs["ctr_a"] = Counter(version=7, total=100)  # another writer moved it
    assert await probe.ask("ctr_a", Add(1)) == 101
    counters.stale_commits = 3  # past the reloads allowed for one message: storage failure
    with pytest.raises(Unavailable):
        await probe.ask("ctr_a", Add(1))
    assert counters.docs["ctr_a"].total == 101


async def test_a_crash_fails_its_caller_restarts_from_the_checkpoint_and_gives_up_after_three(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    counters.docs["ctr_a"] = Counter()
    await probe.ask("ctr_a", Add(1))
    with pytest.raises(Internal):
        await probe.ask("ctr_a", Boom())
    assert counters.loads == 1
    assert await probe.ask("ctr_a", Add(1)) == 2  # restarted: the document was reloaded
    assert counters.loads == 2 and env.engine.supervisor.restarts == 1
    for _ in range(2):
        with pytest.raises(Internal):
            await probe.ask("ctr_a", Boom())
    assert counters.gave_up == ["ctr_a"] and not counters.docs["ctr_a"].open
    assert "counter actor ctr_a crashed" in caplog.text


async def test_actors_of_two_kinds_share_the_supervisor_and_the_wheel(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    counters.docs["ctr_a"] = Counter()
    await env.register({"name": "nap", "steps": [{"name": "s", "type": "sleep", "duration": "1h"}]})
    run_id = await env.start("nap")
    await probe.ask("ctr_a", Arm(env.engine.clock.now() + 1_800_000))
    kinds = {a.kind.name for a in env.engine.supervisor.actors.values()}
    assert kinds == {"run", "counter"}
    with pytest.raises(AssertionError):
        probe.tell(run_id, Add(1))  # a run's id is not a counter's
    await env.until(run_id, "completed", days=1)
    assert counters.firings == [("ctr_a", "tick#1")]


async def test_an_actor_dropped_while_its_drain_loads_it_leaves_quietly(
    env: Env, autojump_clock: MockClock, counters: CounterKind, probe: Probe
) -> None:
    """Found by the fault harness (bench/faults.py, PostgreSQL, `clock`, seed 2102): a node
    losing its leases dropped actors whose drain was loading their document; the drain then
    took the next message from the mailbox the drop had emptied and crashed (AttributeError),
    which counted towards giving the run up as stuck."""
    counters.docs["ctr_d"] = Counter()
    loading, go_on = trio.Event(), trio.Event()
    real_load = counters.load

    async def slow_load(actor_id: str) -> Counter | None:
        loading.set()
        await go_on.wait()
        return await real_load(actor_id)

    counters.load = slow_load  # type: ignore[method-assign]
    answers: list[Any] = []

    async def ask() -> None:
        try:
            answers.append(await probe.ask("ctr_d", Add(1)))
        except Unavailable as exc:
            answers.append(exc)

    restarts = env.engine.supervisor.restarts
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await loading.wait()
        env.engine.supervisor.drop(lambda actor_id: actor_id == "ctr_d")  # its partition left
        go_on.set()
    assert isinstance(answers[0], Unavailable)  # never handled: nothing was changed
    assert env.engine.supervisor.restarts == restarts  # no crash
    assert counters.docs["ctr_d"].total == 0
