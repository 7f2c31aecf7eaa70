"""Executions made by the pure SWF machine and committed through a store: what the runtime
will do, without it. Read-path tests (store contract, boto3 read actions) build their data here."""

from __future__ import annotations

from typing import Any

import attrs

from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.core.swf.model import Execution, TypeRef
from foliot.kinds.swf.actor import transition_unit
from foliot.storage.swf import SwfExecutionStore, SwfStored, SwfUnit

from ..unit.swf_kit import ACT_INFO, T0, WF, WF_INFO, decision, schedule

__all__ = ["CATALOG", "REFUND", "T0", "WF", "WF2", "Live", "decision", "schedule", "start"]

WF2 = TypeRef("Order", "2")
REFUND = TypeRef("Refund", "1")
CATALOG = m.StaticCatalog(
    [WF_INFO, attrs.evolve(WF_INFO, type=WF2), attrs.evolve(WF_INFO, type=REFUND)], [ACT_INFO]
)


class Live:
    """One execution held as the runtime would: its document and version, every message a
    transition committed as one unit."""

    def __init__(self, store: SwfExecutionStore, region: str, stored: SwfStored) -> None:
        self.store = store
        self.region = region
        self.ex: Execution = stored.execution
        self.version = stored.version
        self.successor: Live | None = None

    @property
    def run_id(self) -> str:
        return self.ex.run_id

    async def send(self, msg: m.Message, now: int, new_run_id: str = "") -> m.Transition:
        tr = machine.transition(self.ex, msg, m.Context(now=now, catalog=CATALOG, new_run_id=new_run_id))
        assert isinstance(tr, m.Transition), tr
        unit, continued = transition_unit(self.region, tr, self.version)
        await self.store.swf_commit(unit)
        self.ex, self.version = tr.execution, unit.version
        if continued is not None:
            self.successor = Live(self.store, self.region, SwfStored(self.region, continued.execution, 1))
        return tr

    async def decide(self, now: int, *decisions: dict[str, Any], new_run_id: str = "") -> m.Transition:
        """Poll the pending decision task and answer it with `decisions`."""
        assert self.ex.decision is not None
        scheduled = self.ex.decision.scheduled_event_id
        await self.send(m.PollDecision(scheduled, "decider"), now)
        return await self.send(m.CompleteDecision(scheduled, list(decisions)), now, new_run_id)

    async def complete(self, now: int, result: str = "done") -> None:
        await self.decide(now, decision("CompleteWorkflowExecution", result=result))


async def start(
    store: SwfExecutionStore,
    workflow_id: str,
    run_id: str,
    now: int = T0,
    *,
    region: str = "us-east-1",
    domain: str = "d",
    workflow_type: TypeRef = WF,
    **request: Any,
) -> Live:
    """Start an execution (the machine's first transition, committed as an insert)."""
    info = CATALOG.workflow_type(workflow_type)
    req = m.StartRequest(domain=domain, workflow_id=workflow_id, workflow_type=workflow_type, **request)
    tr = machine.start(req, info, run_id, now)
    assert isinstance(tr, m.Transition), tr
    await store.swf_commit(SwfUnit(region, tr.execution, None, tr.events))
    return Live(store, region, SwfStored(region, tr.execution, 1))
