"""The simulation's workflows and its seeded workload: clients starting runs (with
Idempotency-Keys and business keys, some by signal-with-start), signalling them (with
signalIds, some before the wait, some by business key, some with a stale copy of the run),
cancelling, redriving, pausing, unpausing, rewinding them and skipping their steps; and
workers long-polling a queue, answering, heartbeating, failing or forgetting their tasks.

The operations are drawn up front from the seed (`operations`), so a failing seed can be
replayed with fewer of them (the shrinker in `runner.py`); each draws its own choices at run
time (which run, how long to wait before retrying) from a generator of its own index.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs
import trio

from foliot.actors.dispatcher import task_body
from foliot.core.workflow import machine

from . import api
from .world import World

ORDER = {
    "name": "order",
    "steps": [
        {"name": "pay", "type": "wait", "signal": "paid", "timeout": "2m", "onTimeout": "expire"},
        {
            "name": "charge",
            "type": "task",
            "timeout": "5s",
            "retry": {"maxAttempts": 3, "initialInterval": "1s"},
        },
        {"name": "cool", "type": "sleep", "duration": "30s"},
        {"name": "ship", "type": "wait", "signal": "shipped"},
        {"name": "notify", "type": "task", "timeout": "5s", "retry": {"maxAttempts": 4}, "next": "$end"},
        {"name": "expire", "type": "task", "timeout": "5s", "next": "$end"},
    ],
}
PICK = {
    "name": "pick",
    "steps": [
        {
            "name": "pick",
            "type": "task",
            "queue": "warehouse",
            "timeout": "20s",
            "queueTimeout": "1m",
            "retry": {"maxAttempts": 3, "initialInterval": "1s"},
        },
        {"name": "rest", "type": "sleep", "duration": "70s"},
        {"name": "done", "type": "task", "timeout": "5s"},
    ],
}
NAP = {
    "name": "nap",
    "steps": [
        {"name": "nap", "type": "sleep", "duration": "2m"},
        {"name": "wake", "type": "task", "timeout": "5s"},
    ],
}
FRAGILE = {
    "name": "fragile",
    "steps": [{"name": "risky", "type": "task", "timeout": "3s", "retry": {"maxAttempts": 2}}],
}
FANOUT = {
    "name": "fanout",
    "steps": [
        {"name": "each", "type": "map", "itemsPath": "input.items", "workflow": "leaf", "maxConcurrency": 2},
        {"name": "sum", "type": "task", "timeout": "5s"},
    ],
}
LEAF = {
    "name": "leaf",
    "steps": [{"name": "work", "type": "task", "timeout": "5s", "retry": {"maxAttempts": 3}}],
}
LIMITED = {  # one run per customer at a time; the others wait in its FIFO
    "name": "limited",
    "concurrency": {"limit": 1, "key": "input.customer"},
    "steps": [
        {"name": "sync", "type": "task", "timeout": "5s"},
        {"name": "settle", "type": "sleep", "duration": "5s"},
    ],
}
TURNS = {  # one run per tenant at its `sync` step at a time
    "name": "turns",
    "steps": [
        {
            "name": "sync",
            "type": "task",
            "timeout": "5s",
            "concurrency": {"limit": 1, "key": "input.customer"},
        },
        {"name": "after", "type": "wait", "signal": "paid", "timeout": "30s", "onTimeout": "$end"},
    ],
}
WORKFLOWS = (ORDER, PICK, NAP, FRAGILE, FANOUT, LEAF, LIMITED, TURNS)
STARTED = (("order", 4), ("pick", 2), ("nap", 1), ("fragile", 2), ("fanout", 1), ("limited", 2), ("turns", 1))
LIMITS = {"limited": 1, "turns#sync": 1}  # concurrency limits, by the key's prefix
SIGNALS = ("paid", "shipped")
KINDS = {
    "start": 40,
    "signal": 40,
    "cancel": 8,
    "redrive": 12,
    "pause": 5,
    "unpause": 8,
    "rewind": 4,
    "skip": 4,
}
FIRST_STEP = {w["name"]: w["steps"][0]["name"] for w in WORKFLOWS}
INTERVENTIONS: dict[str, Callable[[str], machine.Message]] = {
    "cancel": machine.Cancel,
    "redrive": machine.Redrive,
    "pause": machine.Pause,
    "unpause": machine.Unpause,
    "skip": lambda reason: machine.Skip({"skipped": True}, reason),
}
QUEUE = "warehouse"
_OPEN = frozenset({"queued", "running", "waiting", "sleeping", "stuck", "paused"})
AIMED_AT = {  # the statuses a client or an operator usually aims each operation at
    "signal": _OPEN,
    "cancel": _OPEN,
    "pause": _OPEN - {"paused"},
    "unpause": frozenset({"paused"}),
    "redrive": frozenset({"failed", "stuck", "timed_out"}),
    "rewind": frozenset({"completed", "failed", "running", "waiting", "sleeping"}),
    "skip": frozenset({"failed", "running", "waiting", "sleeping"}),
}


@attrs.frozen
class Op:
    """One client operation, drawn from the seed."""

    index: int
    at: int  # ms of virtual time it is made at
    kind: str  # start | signal | signal_start | cancel | redrive | pause | unpause | rewind | skip
    workflow: str | None = None
    idempotency_key: str | None = None
    business_key: str | None = None
    signal: str | None = None
    signal_id: str | None = None
    by_key: bool = False  # a signal naming its run by workflow + businessKey
    stale: bool = False  # a signal carrying a copy of the run read earlier
    items: int = 0  # a fanout's items; a limited run's customer

    def line(self) -> str:
        fields = attrs.asdict(self)
        shown = " ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, False, 0) and k != "index")
        return f"op {self.index}: {shown}"


def operations(seed: int, span_ms: int) -> list[Op]:
    rng = random.Random(f"{seed}:workload")
    count = rng.randrange(8, 40)
    times = sorted(rng.randrange(span_ms) for _ in range(count))
    ops = []
    names = [w for w, _ in STARTED]
    weights = [n for _, n in STARTED]
    for index, at in enumerate(times):
        kind = rng.choices(tuple(KINDS), tuple(KINDS.values()))[0]
        if kind == "start":
            workflow = rng.choices(names, weights)[0]
            ops.append(
                Op(
                    index,
                    at,
                    kind,
                    workflow=workflow,
                    idempotency_key=f"idem-{index}" if rng.random() < 0.7 else None,
                    business_key=f"bk-{rng.randrange(4)}" if rng.random() < 0.4 else None,
                    items=rng.randrange(0, 4) if workflow == "fanout" else rng.randrange(2),
                )
            )
        elif kind == "signal":
            ops.append(
                Op(
                    index,
                    at,
                    kind,
                    signal=rng.choice(SIGNALS),
                    signal_id=f"sig-{index}" if rng.random() < 0.8 else None,
                    by_key=rng.random() < 0.15,
                    stale=rng.random() < 0.2,
                )
            )
        elif kind == "signal_start":
            ops.append(
                Op(
                    index,
                    at,
                    kind,
                    workflow="order",
                    idempotency_key=f"idem-{index}" if rng.random() < 0.7 else None,
                    business_key=f"bk-{rng.randrange(4)}",
                    signal=rng.choice(SIGNALS),
                    signal_id=f"sig-{index}" if rng.random() < 0.8 else None,
                )
            )
        else:
            ops.append(Op(index, at, kind))
    return ops


# ---------------------------------------------------------------------- clients


@attrs.define
class Known:
    """A run a client learnt of (a start answered): what later operations may name."""

    run_id: str
    workflow: str
    business_key: str | None
    seen: Any  # the run as the store held it when the start was answered (a stale seed later)


class Clients:
    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.seed = seed
        self.known: list[Known] = []

    async def run(self, op: Op) -> None:
        await trio.sleep_until(op.at / 1000)
        rng = random.Random(f"{self.seed}:op:{op.index}")
        if op.kind == "start":
            await self._start(op, rng)
            return
        if op.kind == "signal_start":
            await self._signal_start(op, rng)
            return
        if not self.known:
            return  # nothing to name yet
        # Mostly a run the operation applies to, as a client or an operator listing runs by
        # status would pick one; else any run it knows of (a refusal, checked too).
        runs = self.world.store.runs
        wanted = AIMED_AT.get(op.kind, frozenset())
        fitting = [k for k in self.known if k.run_id in runs and runs[k.run_id].status in wanted]
        pool = fitting if fitting and rng.random() < 0.8 else self.known
        target = pool[int(rng.random() * len(pool))]
        if op.kind == "signal":
            await self._signal(op, target, rng)
        else:
            if op.kind == "rewind":
                message: machine.Message = machine.Rewind(FIRST_STEP[target.workflow], reason="sim")
            else:
                message = INTERVENTIONS[op.kind]("sim")
            await self.world.call(
                op.index,
                op.kind,
                {"run": target.run_id},
                lambda node: api.intervene(node, target.run_id, message),
            )

    async def _retrying(
        self, op: Op, rng: random.Random, kind: str, args: dict[str, Any], fn: Any, tries: int
    ) -> Any:
        """A client that got no answer tries again, with the same key or signalId."""
        call = None
        for _ in range(tries):
            call = await self.world.call(op.index, kind, args, fn)
            if call.outcome != "unknown" and call.value != "down":
                break
            await trio.sleep(rng.uniform(1.0, 10.0))
        return call

    async def _start(self, op: Op, rng: random.Random) -> None:
        assert op.workflow is not None
        payload: dict[str, Any] = {"op": op.index}
        if op.workflow == "fanout":
            payload["items"] = list(range(op.items))
        if op.workflow in ("limited", "turns"):
            payload["customer"] = f"c{op.items}"
        args = {"workflow": op.workflow, "key": op.idempotency_key, "bk": op.business_key}

        def fn(node: Any) -> Any:
            return api.start(node, op.workflow, payload, op.business_key, op.idempotency_key)

        call = await self._retrying(op, rng, "start", args, fn, 4 if op.idempotency_key else 1)
        self._learn(call, op)

    def _learn(self, call: Any, op: Op) -> None:
        if call is not None and call.outcome == "ok":
            run_id = call.value["runId"]
            if all(k.run_id != run_id for k in self.known):
                assert op.workflow is not None
                seen = self.world.store.runs.get(run_id)
                self.known.append(Known(run_id, op.workflow, op.business_key, seen))

    async def _signal_start(self, op: Op, rng: random.Random) -> None:
        assert op.signal is not None and op.business_key is not None and op.workflow is not None
        args = {"workflow": op.workflow, "key": op.idempotency_key, "bk": op.business_key}
        args.update(name=op.signal, id=op.signal_id)

        def fn(node: Any) -> Any:
            signal = machine.SignalIn(op.signal, {"from": op.signal_id}, op.signal_id)
            return api.signal_start(
                node, op.workflow, op.business_key, signal, {"op": op.index}, op.idempotency_key
            )

        retried = op.idempotency_key is not None or op.signal_id is not None
        self._learn(await self._retrying(op, rng, "signal_start", args, fn, 4 if retried else 1), op)

    async def _signal(self, op: Op, target: Known, rng: random.Random) -> None:
        assert op.signal is not None
        by_key = (target.workflow, target.business_key) if op.by_key and target.business_key else None
        known = target.seen if op.stale else None
        args = {"run": None if by_key else target.run_id, "by": by_key, "name": op.signal, "id": op.signal_id}

        def fn(node: Any) -> Any:
            return api.signal(node, target.run_id, op.signal, op.signal_id, by_key, known)

        await self._retrying(op, rng, "signal", args, fn, 4 if op.signal_id else 1)


# ---------------------------------------------------------------------- workers


async def worker(world: World, number: int) -> None:
    """Long-polls the queue on whichever node is up; each task claimed is answered soon, after
    heartbeats, as a failure, after its deadline, or never."""
    rng = world.handlers
    while True:
        if world.incarnation is None:
            await trio.sleep(1.0)  # virtual time (MockClock): the node is down, poll again soon
            continue
        call = await world.call(
            -1,
            "poll",
            {"worker": number},
            lambda node: api.poll(node, QUEUE, 2, 30.0, f"w{number}"),
            log=False,
        )
        if call.outcome != "ok":
            await trio.sleep(1.0)  # virtual time (MockClock): a worker's back-off after a failed poll
            continue
        for run, task in call.value:
            body = task_body(run, task)
            world.deliver("claim", body, world.incarnations)
            world.spawn(lambda token=task.token, body=body: _work(world, rng, token, body))


async def _work(world: World, rng: random.Random, token: str, body: dict[str, Any]) -> None:
    output = {"step": body["step"], "key": body["idempotencyKey"]}
    what = (
        "soon" if world.calm else rng.choice(("soon", "soon", "soon", "heartbeats", "fail", "late", "never"))
    )
    if what == "never":
        return
    if what == "heartbeats":
        for _ in range(rng.randrange(1, 4)):
            await trio.sleep(rng.uniform(2.0, 8.0))
            await world.call(-1, "heartbeat", {"token": token}, lambda node: api.heartbeat(node, token))
    await trio.sleep(rng.uniform(0.01, 2.0) if what != "late" else rng.uniform(20.0, 60.0))
    if what == "fail":
        await world.call(
            -1, "fail", {"token": token}, lambda node: api.complete(node, token, None, "worker_error")
        )
        return
    await world.complete(token, output)
