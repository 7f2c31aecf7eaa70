"""Child runs: what a run's `run`, `map` and `parallel` steps need beyond the pure machine.

The machine asks for children (`Transition.children`) and for a finished fan-out's outputs
(`Transition.gather`) but cannot read definitions or storage. Before the commit, `settle`
resolves each child's workflow version and starts it with the pure `machine.start` (its own
children too, to the nesting limit), or tells the parent it could not (`child_not_started`:
the history then names no run id for it); and reads the outputs of
a map's or parallel step's children. The parent's transition and every child it starts are then
committed as one unit of work: a parent's step and its children exist together or not at all,
across any crash, and a retried message meets the run at its new `seq` and starts nothing twice.

After a restart (or a partition gained), `reconcile` re-sends what storage says a parent may not
have been told (a child that closed just before the crash) and cancels the open children whose
parent no longer waits for them (it closed, or moved to another generation or step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ...core.workflow import machine
from ...core.workflow.definition import Definition
from ...core.workflow.machine import ChildRunClosed, Gathered, Transition
from ...core.workflow.model import ErrorInfo, Run

if TYPE_CHECKING:
    from .service import Runs

# One settle applies at most this many follow-up messages (a child that cannot start, a
# gather); each consumes a child request or a fan-out, so the bound is never reached in use.
_MAX_ROUNDS: Final = 20_000


async def settle(runs: Runs, tr: Transition, definition: Definition) -> tuple[Transition, list[Transition]]:
    """`tr` with its gathers applied and its children resolved, and the child runs' own start
    transitions (parents before their children) to commit with it."""
    if not tr.children and tr.gather is None:
        return tr, []
    ctx = runs.context()
    resolved: dict[tuple[str, int | None], tuple[Definition, int] | None] = {}
    app = tr.run.app
    for _ in range(_MAX_ROUNDS):
        gather = tr.gather
        if gather is not None:
            outputs = await _outputs(runs, tr.run, gather)
            message: machine.Message = Gathered(gather.step, gather.generation, gather.attempt, outputs)
            tr = machine.chain(tr, machine.transition(tr.run, definition, message, ctx))
            continue
        missing = None
        for request in tr.children:
            key = (request.workflow, request.version)
            if key not in resolved:
                resolved[key] = await runs.host.directory.resolve(app, *key)
            if resolved[key] is None:
                missing = request
                break
        if missing is None:
            break
        which = f"version {missing.version} of " if missing.version is not None else ""
        error = ErrorInfo(None, "workflow_not_found", f"{which}workflow {missing.workflow!r} not found")
        tr = machine.child_not_started(tr, missing, error, definition, ctx)
    started: list[Transition] = []
    for request in tr.children:
        found = resolved[(request.workflow, request.version)]
        assert found is not None
        child_definition, version = found
        child = machine.start(
            run_id=request.run_id,
            app=app,
            definition=child_definition,
            version=version,
            input=request.input,
            business_key=None,
            run_timeout_ms=None,
            trace_id=tr.run.trace_id,  # one trace across a parent and its children
            ctx=ctx,
            parent=request.parent,
            depth=request.depth,
            priority=tr.run.priority,  # a child run inherits its parent's priority
        )
        child, grandchildren = await settle(runs, child, child_definition)
        started.append(child)
        started.extend(grandchildren)
    return tr, started


async def _outputs(runs: Runs, run: Run, gather: machine.Gather) -> tuple[Any, ...]:
    """The outputs of the step's children in item order (None where a child did not complete)."""
    outputs: list[Any] = [None] * gather.total
    for child in await runs.host.store.children_of(run.run_id):
        ref = child.parent
        if ref is None or (ref.step, ref.generation, ref.attempt) != (
            gather.step,
            gather.generation,
            gather.attempt,
        ):
            continue
        if child.status == "completed" and 0 <= ref.index < gather.total:
            outputs[ref.index] = child.output
    return tuple(outputs)


def closed_message(child: Run) -> ChildRunClosed:
    """What a closed child tells its parent."""
    assert child.parent is not None
    output = child.output if child.status == "completed" else None
    return ChildRunClosed(child.run_id, child.parent, child.status, output, child.error)


def waits_for(parent: Run, child: Run) -> bool:
    """Whether `parent` still waits for `child` (one of its step's open children)."""
    fan = parent.fan
    ref = child.parent
    return (
        parent.is_open
        and fan is not None
        and ref is not None
        and (ref.step, ref.generation, ref.attempt) == (fan.step, fan.generation, fan.attempt)
        and fan.slot(child.run_id) is not None
    )


async def reconcile(runs: Runs, only: Callable[[str], bool]) -> tuple[int, int]:
    """After a restart: re-tell parents of closed children they wait for, cancel open children
    nobody waits for (unless `abandon`). `only`: the actors this node recovers. Returns
    (parents told, children cancelled)."""
    told = cancelled = 0
    for child, parent in await runs.host.store.child_links():
        if not child.is_open:
            if only(parent.run_id) and waits_for(parent, child):
                runs.tell(parent.run_id, closed_message(child))
                told += 1
        elif only(child.run_id) and not waits_for(parent, child):
            assert child.parent is not None
            if child.parent.on_close == "cancel":
                reason = f"its parent {parent.run_id} no longer waits for it"
                runs.tell(child.run_id, machine.Cancel(reason))
                cancelled += 1
    return told, cancelled
