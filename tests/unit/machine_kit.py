"""A small harness for driving the pure machine in tests."""

from __future__ import annotations

import itertools
from typing import Any

from foliot.core.workflow import machine
from foliot.core.workflow.definition import Definition, parse_definition
from foliot.core.workflow.machine import Context, Transition
from foliot.core.workflow.model import Run

T0 = 1_800_000_000_000  # a fixed "now" in epoch ms


class Kit:
    """Holds one run and its definition; each call applies one message at a given time."""

    def __init__(
        self,
        steps: list[dict[str, Any]],
        *,
        payload_max: int = 262_144,
        buffer_max: int = 100,
        buffer_max_bytes: int = 1_048_576,
        **doc: Any,
    ) -> None:
        self.definition: Definition = parse_definition({"name": "wf", "steps": steps, **doc})
        self.tokens = (f"tok{i}" for i in itertools.count(1))
        self.child_ids = (f"child{i}" for i in itertools.count(1))
        self.now = T0
        self.payload_max = payload_max
        self.buffer_max = buffer_max
        self.buffer_max_bytes = buffer_max_bytes
        self.history: list[Transition] = []
        self.run: Run
        # Child runs the app's lane grants per transition (None: every one asked for).
        self.grants: list[int] | None = None

    def ctx(self) -> Context:
        return Context(
            now=self.now,
            new_token=lambda: next(self.tokens),
            payload_max=self.payload_max,
            signal_buffer_max=self.buffer_max,
            signal_buffer_max_bytes=self.buffer_max_bytes,
            new_run_id=lambda: next(self.child_ids),
            grant_children=None if self.grants is None else self._grant,
        )

    def _grant(self, app: str, n: int) -> tuple[int, int]:
        assert self.grants is not None
        granted = min(n, self.grants.pop(0) if self.grants else n)
        return granted, 500

    def start(
        self, input: Any = None, run_timeout_ms: int | None = None, depth: int = 0, tree: int | None = None
    ) -> Transition:
        tr = machine.start(
            run_id="run1",
            app="app",
            definition=self.definition,
            version=1,
            input=input,
            business_key=None,
            run_timeout_ms=run_timeout_ms,
            trace_id="0" * 32,
            ctx=self.ctx(),
            depth=depth,
            tree=tree,
        )
        self.run = tr.run
        self.history.append(tr)
        return tr

    def send(self, message: machine.Message, *, after_ms: int = 0) -> Transition:
        self.now += after_ms
        tr = machine.transition(self.run, self.definition, message, self.ctx())
        self.run = tr.run
        self.history.append(tr)
        return tr

    # conveniences -----------------------------------------------------------

    @property
    def token(self) -> str:
        assert self.run.task is not None, f"no open task (status {self.run.status})"
        return self.run.task.token

    def answer(
        self, outcome: machine.Outcome, *, via_api: bool = False, token: str | None = None
    ) -> Transition:
        return self.send(machine.TaskAnswer(token or self.token, outcome, via_api))

    def ok(self, output: Any = None, next: str | None = None) -> Transition:
        return self.answer(machine.Completed(output, next))

    def fail(self, cls: str = "boom", retryable: bool = True, message: str = "failed") -> Transition:
        return self.answer(machine.Failed(cls, message, retryable))

    def fire(self) -> Transition:
        """Advance to the step timer's due time and fire it."""
        timer = self.run.timer
        assert timer is not None, f"no step timer (status {self.run.status})"
        self.now = max(self.now, timer.due)
        return self.send(machine.TimerFired("step", timer.kind, timer.key))

    def fire_run_timeout(self) -> Transition:
        assert self.run.deadline is not None
        self.now = max(self.now, self.run.deadline)
        return self.send(machine.TimerFired("run", "run_timeout", str(self.run.generation)))

    def events(self) -> list[str]:
        return [e.type for tr in self.history for e in tr.events]

    def effects(self) -> list[Any]:
        return [e for tr in self.history for e in tr.effects]
