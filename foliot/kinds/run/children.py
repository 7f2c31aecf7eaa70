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

from ...core.errors import OverQuota
from ...core.workflow import machine
from ...core.workflow.definition import Definition
from ...core.workflow.machine import ChildRunClosed, Gathered, Transition
from ...core.workflow.model import ErrorInfo, Run
from ...core.workflow.payload import PayloadError, payload_size

if TYPE_CHECKING:
    from .service import Runs

# One settle applies at most this many follow-up messages (a child that cannot start, a
# gather); each consumes a child request or a fan-out, so the bound is never reached in use.
_MAX_ROUNDS: Final = 20_000
_PAGE: Final = 64  # children read at once to gather a fan-out's outputs
RECONCILE_PAGE: Final = 500  # child links recovery reads at once (`reconcile`)


class _TreeTooLarge(Exception):
    """More runs than the budget: unwinds to the `settle` that began the tree."""


async def settle(runs: Runs, tr: Transition, definition: Definition) -> tuple[Transition, list[Transition]]:
    """`tr` with its gathers applied and its children resolved, and the child runs' own start
    transitions (parents before their children) to commit with it.

    At most `FOLIOT_MAX_TREE_RUNS` runs (or the app's `maxTreeRuns` override) are created in one
    unit of work (children, their own children, ...): past it, nothing is created and the step
    that asked fails with `too_many_runs`. The count stops the walk as soon as it passes the
    limit, so a definition whose tree is exponential costs no more than the limit to refuse.
    A tree that would put the app over its open-runs limit (`Runs.within_open_runs`) is not
    started either: the step fails with `quota_exceeded`."""
    if not tr.children and tr.gather is None:
        return tr, []
    limits = await runs.host.directory.limits(tr.run.app, runs.host.settings)
    limit = limits.max_tree_runs
    fan = tr.run.fan
    step = fan.step if fan is not None else ""
    try:
        settled, started = await _settle(runs, tr, definition, [limit])
        if started:
            # The app's open-runs limit (issue 37), for the whole tree at once: all or none.
            await runs.within_open_runs(tr.run.app, len(started))
        return settled, started
    except _TreeTooLarge:
        code = "too_many_runs"
        text = (
            f"step {step!r} would start more than {limit} runs in one go (its children and theirs;"
            f" {limits.setting('maxTreeRuns')}): none was started"
        )
    except OverQuota as exc:
        code = "quota_exceeded"
        text = f"step {step!r} started no child run: {exc.message}"
    if fan is None:  # pragma: no cover - children are only asked for by a fan-out step
        raise AssertionError("a tree of child runs without a fan-out")
    refused = machine.TreeTooLarge(fan.step, fan.generation, fan.attempt, text, code)
    return machine.chain(tr, machine.transition(tr.run, definition, refused, runs.context())), []


async def _settle(
    runs: Runs, tr: Transition, definition: Definition, budget: list[int]
) -> tuple[Transition, list[Transition]]:
    if not tr.children and tr.gather is None:
        return tr, []
    ctx = runs.context()
    resolved: dict[tuple[str, int | None], tuple[Definition, int] | None] = {}
    app = tr.run.app
    for _ in range(_MAX_ROUNDS):
        gather = tr.gather
        if gather is not None:
            outputs, too_large = await _outputs(runs, tr.run, gather)
            message: machine.Message = Gathered(
                gather.step, gather.generation, gather.attempt, outputs, too_large
            )
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
        budget[0] -= 1
        if budget[0] < 0:
            raise _TreeTooLarge()
        found = resolved[(request.workflow, request.version)]
        assert found is not None
        child_definition, version = found
        child = runs.begin(
            run_id=request.run_id,
            app=app,
            definition=child_definition,
            version=version,
            input=request.input,
            trace_id=tr.run.trace_id,  # one trace across a parent and its children
            ctx=ctx,
            parent=request.parent,
            depth=request.depth,
            priority=tr.run.priority,  # a child run inherits its parent's priority
            tree=request.tree,
        )
        child, grandchildren = await _settle(runs, child, child_definition, budget)
        started.append(child)
        started.extend(grandchildren)
    return tr, started


async def _outputs(runs: Runs, run: Run, gather: machine.Gather) -> tuple[tuple[Any, ...], int]:
    """The outputs of the step's children in item order (None where a child did not complete),
    read `_PAGE` children at a time; or, as soon as what was read passes the payload limit,
    `((), bytes so far)`: nothing more is read (a 1,000-item map of 250 KB outputs had loaded
    1.45 GB before its size was checked)."""
    outputs: list[Any] = [None] * gather.total
    limit = runs.host.settings.payload_max_bytes
    size = 2 + 5 * gather.total  # `[]`, and `null,` for each item until its output is read
    after: tuple[int, str] | None = None
    while True:
        page = await runs.host.store.children_of(run.run_id, after, _PAGE)
        for child in page:
            ref = child.parent
            if ref is None or (ref.step, ref.generation, ref.attempt) != (
                gather.step,
                gather.generation,
                gather.attempt,
            ):
                continue
            if child.status == "completed" and 0 <= ref.index < gather.total:
                outputs[ref.index] = child.output
                try:
                    size += payload_size(child.output) - 4
                except PayloadError:
                    size = limit + 1
                if size > limit:
                    return (), size
        if len(page) < _PAGE:
            return tuple(outputs), 0
        last = page[-1]
        after = (last.created_at, last.run_id)


def closed_message(child: Run) -> ChildRunClosed:
    """What a closed child tells its parent."""
    assert child.parent is not None
    output = child.output if child.status == "completed" else None
    return ChildRunClosed(child.run_id, child.parent, child.status, output, child.error, child.tree or 0)


async def reconcile(runs: Runs, only: Callable[[str], bool]) -> tuple[int, int]:
    """After a restart: re-tell parents of closed children they wait for, cancel open children
    nobody waits for (unless `abandon`). `only`: the actors this node recovers. Returns
    (parents told, children cancelled).

    Paged (`RECONCILE_PAGE` links at a time, keyset order, the loop yields at each read): a
    page names its children without their documents; their parents' fan-outs are read once
    per page (not their documents), after the page, so a parent is never older than the
    children it is judged against (a child started after a stale read of its parent would
    look abandoned); only the children acted on are read whole. Memory is one page's, at any
    number of open children (100,000 children of 100 maps had needed ~10 GB read at once)."""
    store = runs.host.store
    told = cancelled = 0
    after: tuple[str, int, str] | None = None
    while True:
        page = await store.child_links(after, RECONCILE_PAGE)
        if not page:
            return told, cancelled
        after = page[-1].cursor
        fans = await store.parent_fans(sorted({link.parent_run_id for link in page}))
        waited: dict[str, frozenset[str]] = {
            run_id: frozenset(slot.run_id for slot in found.fan.open)
            for run_id, found in fans.items()
            if found.is_open and found.fan is not None
        }
        tell: list[str] = []  # closed children whose parents wait for them
        cancel: list[str] = []  # open children nobody waits for
        for link in page:
            if link.parent_run_id not in fans:
                continue  # the parent is gone (pruned since the page was read)
            waits = link.run_id in waited.get(link.parent_run_id, ())
            if not link.is_open:
                if waits and only(link.parent_run_id):
                    tell.append(link.run_id)
            elif not waits and only(link.run_id):
                cancel.append(link.run_id)
        for child in (await store.get_runs(tell + cancel)).values():
            ref = child.parent
            if ref is None:  # pragma: no cover - a child link names a run with a parent
                continue
            if not child.is_open:
                if child.run_id in waited.get(ref.run_id, ()):
                    runs.tell(ref.run_id, closed_message(child))
                    told += 1
            elif ref.on_close == "cancel":
                reason = f"its parent {ref.run_id} no longer waits for it"
                runs.tell(child.run_id, machine.Cancel(reason))
                cancelled += 1
        if len(page) < RECONCILE_PAGE:
            return told, cancelled
