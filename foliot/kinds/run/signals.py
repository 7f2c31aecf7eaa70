"""Which signals a run can still consume: the names its pinned workflow version, or any later
version of the same workflow, waits for (a rewind with `version` can move the run to a later
version; an earlier one is not counted: a name only an older version knew comes from a sender
that was not updated, which is what the check is for). Read through the directory's caches
(a version registered on another node is seen within the directory's one second)."""

from __future__ import annotations

import attrs

from ...actors.directory import Directory
from ...core.errors import UnknownSignal
from ...core.workflow.model import Run
from ...core.workflow.signals import awaited_signals, listed, unknown_signal_message


@attrs.frozen
class Reachable:
    names: frozenset[str]
    first: int  # the versions read: first..last
    last: int

    def versions(self, workflow: str) -> str:
        if self.last == self.first:
            return f"{workflow!r} version {self.first}"
        return f"{workflow!r} versions {self.first}..{self.last}"


async def reachable_signals(directory: Directory, run: Run, want: str | None = None) -> Reachable:
    """The names `run` can wait for, from its version on. With `want`, stops as soon as that
    name is found (the common case costs one cached definition read)."""
    names: set[str] = set()
    pinned = await directory.maybe_definition(run.app, run.workflow, run.version)
    if pinned is not None:
        names |= awaited_signals(pinned)
    last = run.version
    if want is not None and want in names:
        return Reachable(frozenset(names), run.version, last)
    latest = await directory.latest_workflow(run.app, run.workflow)
    for version in range(run.version + 1, (latest.version if latest is not None else 0) + 1):
        definition = await directory.maybe_definition(run.app, run.workflow, version)
        last = version
        if definition is not None:
            names |= awaited_signals(definition)
            if want is not None and want in names:
                break
    return Reachable(frozenset(names), run.version, last)


async def refuse_unknown_signal(directory: Directory, run: Run, name: str) -> None:
    """Raise `UnknownSignal` (422) when no version `run` can reach waits for `name`, so a typo
    is answered instead of buffered forever; an awaited name costs no read at all."""
    if run.wait_signal == name or name in run.wait_signals:
        return
    reachable = await reachable_signals(directory, run, want=name)
    if name in reachable.names:
        return
    raise UnknownSignal(
        unknown_signal_message(name, reachable.names, reachable.versions(run.workflow)),
        known=listed(reachable.names),
    )
