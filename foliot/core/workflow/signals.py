"""The signal names a workflow definition can wait for (pure): what lets the API refuse a
signal no step will ever consume (`unknown_signal`) and `why` flag one already buffered.

A definition is data, so the set is exact: every name a step awaits (`Step.awaited`: a wait
step's `signal`, or each of its `signals`). Which versions count for a run is the caller's
choice (`foliot.kinds.run.signals`: the run's pinned version and every later one).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .definition import Definition

MAX_LISTED = 50  # known names named in a refusal (sorted); a definition has few


def awaited_signals(definition: Definition) -> frozenset[str]:
    """Every signal name some step of `definition` can wait for."""
    return frozenset(name for step in definition.steps for name in step.awaited)


def listed(names: Iterable[str]) -> list[str]:
    """Known names as a refusal lists them: sorted, at most `MAX_LISTED`."""
    return sorted(names)[:MAX_LISTED]


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells (`payment-confrimed` → `payment-confirmed`),
    or None when none is close."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return found[0] if found else None


def unknown_signal_message(name: str, known: frozenset[str], versions: str) -> str:
    """The refusal's text: the name, the closest known one, the known ones."""
    if not known:
        return f"no step of {versions} waits for any signal, so {name!r} would never be consumed"
    near = closest(name, known)
    hint = f"; did you mean {near!r}?" if near is not None else ""
    shown = ", ".join(repr(n) for n in listed(known))
    return f"no step of {versions} waits for signal {name!r}{hint} (it waits for {shown})"
