"""The combined workload (issue 38): definitions drawn from the seed that put every feature side
by side, and the operations that exercise where they meet.

Per seed (`Definitions.draw`), from a generator of its own (so the original workload of
`workload.py`, and the regression seeds that name its operations, are unchanged):

- `ship`: a child workflow with a workflow-level `concurrency` key (its customer), a task step
  with a keyed `rateLimit` and a `priority`, retried;
- `combo`: a parent whose steps are drawn from `prep` (a task with a step-level `concurrency`
  key and a priority), `fan` (a `map` of `ship` children, `maxConcurrency` 1..3), `both` (a
  `parallel` of a `ship` and a `leaf`), `one` (a `run` of `ship`), each with or without
  `onFailure: refund` and `onParentClose: abandon`; then `charge` (declined by its handler
  when the input says so, `onFailure: refund`), `done`, and `refund`, the compensation, which
  goes to `$fail` with or without a `failError`;
- versions 2 and 3 of `combo`, deployed during the workload (`deploy`) and migrated to
  (`migrate`): `maxConcurrency` changed (mid-map migrations), timeouts and priorities changed,
  and in version 3 perhaps a step dropped (a run at it is refused: stranded).

The operations (indices after the original workload's): starts of `combo` (some declined, some
with a priority), debounced starts of `ship` (trailing or leading bursts on a few keys),
`deploy`, `migrate`, `edit` (a state edit), and the interventions (cancel, redrive, rewind,
skip, pause, unpause) aimed at the combined runs.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import attrs
import trio

from foliot.core.views import run_view
from foliot.core.workflow import machine
from foliot.kinds.run.debounce import DebouncedStart

from . import api
from .store import APP
from .world import World

SHIP_KEY = "ship"  # the prefix of `ship`'s concurrency keys (`<workflow>:<value>`)
CUSTOMERS = ("c0", "c1", "c2")
KINDS = {
    "combo": 30,
    "debounced": 8,
    "deploy": 6,
    "migrate": 14,
    "edit": 4,
    "cancel": 6,
    "redrive": 8,
    "rewind": 4,
    "skip": 3,
    "pause": 3,
    "unpause": 5,
}
COMPENSATION = "refund"


def _ship(rng: random.Random) -> dict[str, Any]:
    return {
        "name": "ship",
        "concurrency": {"limit": rng.choice((1, 2)), "key": "input.customer"},
        "steps": [
            {
                "name": "label",
                "type": "task",
                "timeout": "5s",
                "priority": rng.randint(1, 5),
                "rateLimit": {
                    "limit": rng.choice((1, 2, 5)),
                    "period": rng.choice(("2s", "10s")),
                    "key": "input.customer",
                },
                "retry": {"maxAttempts": 2, "initialInterval": "1s"},
            }
        ],
    }


def _combo(rng: random.Random) -> dict[str, Any]:
    def fan_extras(step: dict[str, Any]) -> dict[str, Any]:
        if rng.random() < 0.6:
            step["onFailure"] = COMPENSATION
        if rng.random() < 0.25:
            step["onParentClose"] = "abandon"
        return step

    menu = {
        "prep": lambda: {
            "name": "prep",
            "type": "task",
            "timeout": "5s",
            "priority": rng.randint(1, 5),
            "concurrency": {"limit": rng.choice((1, 2)), "key": "input.customer"},
            "retry": {"maxAttempts": 2},
        },
        "fan": lambda: fan_extras(
            {
                "name": "fan",
                "type": "map",
                "itemsPath": "input.items",
                "workflow": "ship",
                "maxConcurrency": rng.randint(1, 3),
            }
        ),
        "both": lambda: fan_extras(
            {
                "name": "both",
                "type": "parallel",
                "branches": [
                    {"name": "a", "workflow": "ship", "inputPath": "input.one"},
                    {"name": "b", "workflow": "leaf"},
                ],
            }
        ),
        "one": lambda: fan_extras(
            {"name": "one", "type": "run", "workflow": "ship", "inputPath": "input.one"}
        ),
    }
    chosen = [name for name in menu if rng.random() < 0.7] or ["fan"]
    rng.shuffle(chosen)
    steps = [menu[name]() for name in chosen]
    steps.append(
        {
            "name": "charge",
            "type": "task",
            "timeout": "3s",
            "retry": {"maxAttempts": 2, "initialInterval": "1s"},
            "onFailure": COMPENSATION,
        }
    )
    steps.append({"name": "done", "type": "task", "timeout": "5s", "next": "$end"})
    refund: dict[str, Any] = {
        "name": COMPENSATION,
        "type": "task",
        "timeout": "5s",
        "retry": {"maxAttempts": 3, "initialInterval": "1s"},
        "next": "$fail",
    }
    if rng.random() < 0.5:
        refund["failError"] = {"class": "refunded", "message": "the order was refunded"}
    steps.append(refund)
    return {"name": "combo", "steps": steps}


def _next_version(rng: random.Random, previous: dict[str, Any], drop: bool) -> dict[str, Any]:
    """A new version: maxConcurrency, timeouts and priorities changed; perhaps a step dropped."""
    definition = copy.deepcopy(previous)
    for step in definition["steps"]:
        if step["type"] == "map" and rng.random() < 0.8:
            step["maxConcurrency"] = rng.randint(1, 4)
        if step["type"] == "task" and rng.random() < 0.3:
            step["timeout"] = rng.choice(("3s", "5s", "8s"))
        if "priority" in step and rng.random() < 0.5:
            step["priority"] = rng.randint(1, 5)
    optional = [s for s in definition["steps"] if s["name"] in ("prep", "fan", "both", "one")]
    if drop and len(optional) > 1 and rng.random() < 0.5:
        definition["steps"].remove(rng.choice(optional))
    return definition


@attrs.frozen
class Definitions:
    ship: dict[str, Any]
    versions: tuple[dict[str, Any], ...]  # combo's versions 1, 2, 3

    @classmethod
    def draw(cls, seed: int) -> Definitions:
        rng = random.Random(f"{seed}:definitions")
        first = _combo(rng)
        second = _next_version(rng, first, drop=False)
        third = _next_version(rng, second, drop=True)
        return cls(_ship(rng), (first, second, third))

    def ship_limit(self) -> int:
        return int(self.ship["concurrency"]["limit"])

    def prep_limit(self, version: int) -> int:
        for step in self.versions[version - 1]["steps"]:
            if step["name"] == "prep":
                return int(step["concurrency"]["limit"])
        return 1


@attrs.frozen
class ComboOp:
    """One operation of the combined workload."""

    index: int
    at: int
    kind: str
    items: int = 0
    customer: str = "c0"
    decline: bool = False
    priority: int | None = None
    debounce_key: str | None = None
    debounce_mode: str = "trailing"

    # The fields `Op` has, so the runner and the report treat both alike.
    workflow: str | None = None
    idempotency_key: str | None = None
    business_key: str | None = None

    def line(self) -> str:
        fields = attrs.asdict(self)
        shown = " ".join(
            f"{k}={v}"
            for k, v in fields.items()
            if v not in (None, False, 0)
            and k != "index"
            and (self.kind in ("combo", "debounced") or k not in ("customer", "debounce_mode"))
        )
        return f"op {self.index}: combined {shown}"


def operations(seed: int, span_ms: int, first: int) -> list[ComboOp]:
    rng = random.Random(f"{seed}:combined")
    count = rng.randrange(6, 30)
    times = sorted(rng.randrange(span_ms) for _ in range(count))
    ops = []
    for number, at in enumerate(times):
        kind = rng.choices(tuple(KINDS), tuple(KINDS.values()))[0]
        customer = rng.choice(CUSTOMERS)
        if kind == "combo":
            ops.append(
                ComboOp(
                    first + number,
                    at,
                    kind,
                    items=rng.randrange(0, 5),
                    customer=customer,
                    decline=rng.random() < 0.3,
                    priority=rng.randint(1, 5) if rng.random() < 0.3 else None,
                    workflow="combo",
                )
            )
        elif kind == "debounced":
            ops.append(
                ComboOp(
                    first + number,
                    at,
                    kind,
                    customer=customer,
                    debounce_key=(key := f"d{rng.randrange(2)}"),
                    debounce_mode="trailing" if key == "d0" else "leading",  # a key keeps its mode
                    workflow="ship",
                )
            )
        else:
            ops.append(ComboOp(first + number, at, kind))
    return ops


# ---------------------------------------------------------------------- clients

_OPEN = frozenset({"queued", "running", "waiting", "sleeping", "stuck", "paused"})
AIMED_AT = {
    "cancel": _OPEN,
    "pause": _OPEN - {"paused"},
    "unpause": frozenset({"paused"}),
    "redrive": frozenset({"failed", "stuck", "timed_out"}),
    "rewind": frozenset({"completed", "failed", "running", "waiting", "sleeping"}),
    "skip": frozenset({"failed", "running", "waiting", "sleeping"}),
    "migrate": _OPEN,
    "edit": _OPEN | {"failed"},
}
SIMPLE: dict[str, Any] = {
    "cancel": machine.Cancel,
    "redrive": machine.Redrive,
    "pause": machine.Pause,
    "unpause": machine.Unpause,
    "skip": lambda reason: machine.Skip({"skipped": True}, reason),
}


class CombinedClients:
    """The combined workload's callers: starts, debounced starts, deploys, migrations, state
    edits and interventions aimed at the runs of `combo` and `ship` (children included, as an
    operator listing runs by status would pick them)."""

    def __init__(self, world: World, definitions: Definitions) -> None:
        self.world = world
        self.definitions = definitions
        self.deployed = 1  # combo's versions registered so far

    def register(self) -> None:
        self.world.store.add_workflow(self.definitions.ship)
        self.world.store.add_workflow(self.definitions.versions[0])

    async def run(self, op: ComboOp) -> None:
        await trio.sleep_until(op.at / 1000)
        rng = random.Random(f"{self.world.seed}:combined:{op.index}")
        if op.kind == "combo":
            await self._start(op, rng)
        elif op.kind == "debounced":
            await self._debounced(op)
        elif op.kind == "deploy":
            if self.deployed < len(self.definitions.versions):
                self.world.store.add_workflow(self.definitions.versions[self.deployed])
                self.deployed += 1
                self.world.events.append((self.world.now(), f"combo v{self.deployed} deployed"))
        else:
            await self._aimed(op, rng)

    async def _start(self, op: ComboOp, rng: random.Random) -> None:
        items = [{"customer": CUSTOMERS[(op.items + i) % len(CUSTOMERS)], "i": i} for i in range(op.items)]
        payload = {
            "op": op.index,
            "customer": op.customer,
            "items": items,
            "one": {"customer": op.customer},
            "decline": op.decline,
        }
        key = f"idem-{op.index}"
        args = {"workflow": "combo", "key": key, "bk": None}

        def fn(node: Any) -> Any:
            return api.start(node, "combo", payload, None, key, priority=op.priority)

        for _ in range(4):
            call = await self.world.call(op.index, "start", args, fn)
            if call.outcome != "unknown" and call.value != "down":
                break
            await trio.sleep(rng.uniform(1.0, 10.0))

    async def _debounced(self, op: ComboOp) -> None:
        assert op.debounce_key is not None
        request = DebouncedStart(
            APP, "ship", None, {"customer": op.customer}, None, None, op.debounce_key, 5_000, op.debounce_mode
        )

        async def fn(node: Any) -> Any:
            body, status = await node.runs.debounced_start(request, run_view)
            return {"runId": body["runId"], "status": status}

        await self.world.call(op.index, "debounced", {"key": op.debounce_key, "mode": op.debounce_mode}, fn)

    async def _aimed(self, op: ComboOp, rng: random.Random) -> None:
        runs = self.world.store.runs
        mine = sorted(r for r, run in runs.items() if run.workflow in ("combo", "ship"))
        if not mine:
            return
        wanted = AIMED_AT.get(op.kind, frozenset())
        fitting = [r for r in mine if runs[r].status in wanted]
        if op.kind == "migrate":  # mostly a run waiting for its children: a mid-fan-out migration
            fanning = [r for r in fitting if runs[r].workflow == "combo" and runs[r].fan is not None]
            fitting = fanning if fanning and rng.random() < 0.7 else fitting
        pool = fitting if fitting and rng.random() < 0.85 else mine
        run_id = pool[int(rng.random() * len(pool))]
        run = runs[run_id]
        message: machine.Message
        if op.kind == "rewind":
            compensated = run.error.compensated if run.error is not None else None
            if compensated is not None and compensated.step is not None and rng.random() < 0.7:
                to = compensated.step  # the failed step, as the 409 of a redrive points at
            else:
                to = self._steps(run)[0]
            message = machine.Rewind(to, reason="sim")
        elif op.kind == "edit":
            message = machine.EditState({"note": op.index}, (), "sim")
        elif op.kind == "migrate":
            if run.workflow != "combo" or self.deployed < 2:
                return
            version = rng.choice(
                [v for v in range(1, self.deployed + 1) if v != run.version] or [run.version]
            )

            async def migrate(node: Any) -> Any:
                target = await node.directory.maybe_definition(APP, "combo", version)
                assert target is not None
                return await api.intervene(node, run_id, machine.Migrate(target, version, (), "sim"))

            await self.world.call(op.index, "migrate", {"run": run_id, "to": version}, migrate)
            return
        else:
            message = SIMPLE[op.kind]("sim")
        await self.world.call(
            op.index, op.kind, {"run": run_id}, lambda node: api.intervene(node, run_id, message)
        )

    def _steps(self, run: Any) -> list[str]:
        if run.workflow == "ship":
            return ["label"]
        return [s["name"] for s in self.definitions.versions[run.version - 1]["steps"]]
