"""How one step of a run in flight compares across two versions of its workflow (pure).

`step_verdict(old, new)` names every difference between the step a run stands at and the step of
the same name in a candidate version: `compatible` (nothing that matters changed), `moves` (the
step is there but differs: each difference named) or `stranded` (the step is gone). The machine's
`Migrate` uses it to decide whether a run stays where it stands or re-enters its step, and
`deploy.compare` reports it for the dry-run; it lives apart from `deploy` so the machine can
import it (`deploy` imports the machine for its replay).

A run waiting for the children of its run, map or parallel step (its fan-out, `Run.fan`) is
never made to start them again by a migration: it keeps its completed and running children and
only the items not started yet follow the new step (`Verdict.keeps_fan`); a new step that no
longer names those children (`FAN_IDENTITY`) refuses the run (`FAN_OUT_CHANGED`). `Fans` counts
what a fan-out holds and `kept_text`/`refused_text` say it, for the machine's refusal and the
dry-run's plan alike.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from .definition import Definition, Retry, Step
from .model import FanOut

COMPATIBLE: Final = "compatible"
MOVES: Final = "moves"
STRANDED: Final = "stranded"

# Differences a run cannot carry where it stands: what is in flight at the step (the task's
# queue or handler, the signals waited for, the child runs started, the sleep armed) was made
# by the old step, so a migration re-enters the step (a new generation, as a rewind does).
# The others (next, onFailure, retry, timeouts, ...) apply when the step ends: the run stays.
REENTER: Final = frozenset(
    {
        "kind",
        "handler",
        "queue",
        "signals",
        "workflow",
        "duration",
        "itemsPath",
        "inputPath",
        "maxConcurrency",
    }
)

# Differences that name the children a fan-out step started: its kind, the child workflow (a
# parallel's branch list: names, workflows, versions) and a map's item source. A run waiting
# for its children cannot keep them across such a change, and a migration never restarts them
# (finished work is never redone by a version change): it refuses the run (`FAN_OUT_CHANGED`).
# Any other difference (maxConcurrency, inputPath, tolerance, retry, timeout, next, ...) keeps
# the children: the items not started yet, later attempts and the step's end follow the new step.
FAN_IDENTITY: Final = frozenset({"kind", "workflow", "itemsPath"})
FAN_OUT_CHANGED: Final = "fan_out_changed"


@attrs.frozen
class Difference:
    field: str
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new}


@attrs.frozen
class Verdict:
    verdict: str  # compatible | moves | stranded
    differences: tuple[Difference, ...] = ()

    @property
    def in_place(self) -> bool:
        """A migration keeps the run where it stands (else it re-enters the step)."""
        return self.verdict == COMPATIBLE or (
            self.verdict == MOVES and not any(d.field in REENTER for d in self.differences)
        )

    @property
    def keeps_fan(self) -> bool:
        """A run waiting for its step's children keeps them (else the migration refuses it)."""
        return self.verdict == COMPATIBLE or (
            self.verdict == MOVES and not any(d.field in FAN_IDENTITY for d in self.differences)
        )

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "differences": [d.to_json() for d in self.differences]}


@attrs.frozen
class Fans:
    """What the fan-outs of `runs` runs hold, summed: their children completed, failed or
    cancelled, running (`open`), and the items not started yet (`total - started`)."""

    runs: int = 0
    total: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    open: int = 0

    @classmethod
    def of(cls, fan: FanOut) -> Fans:
        return cls(1, fan.total, fan.started, fan.completed, fan.failed, fan.cancelled, len(fan.open))

    def plus(self, other: Fans) -> Fans:
        return Fans(*(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True)))

    @property
    def not_started(self) -> int:
        return max(0, self.total - self.started)

    def to_json(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "running": self.open,
            "notStarted": self.not_started,
        }


_NOUNS: Final = {"map": ("item", "items"), "parallel": ("branch", "branches"), "run": ("child", "children")}


def _noun(n: int, kind: str) -> str:
    one, many = _NOUNS.get(kind, ("child", "children"))
    return one if n == 1 else many


def kept_text(kind: str, fans: Fans, to: str, differences: tuple[Difference, ...]) -> str:
    """What a migration to `to` ("v2") keeps of `fans` (at a `kind` step): e.g. "keeps 12 completed items and
    2 running; 6 items not started follow v2 (maxConcurrency 2 → 4)"."""
    subject = "keeps" if fans.runs == 1 else f"{fans.runs} runs keep"
    ended = fans.failed + fans.cancelled
    if fans.completed or ended:
        text = f"{subject} {fans.completed} completed {_noun(fans.completed, kind)}"
        if ended:
            text += f", {ended} failed or cancelled (counted against the tolerance),"
        text += f" and {fans.open} running"
    else:
        text = f"{subject} {fans.open} running {_noun(fans.open, kind)}"
    if fans.not_started:
        text += f"; {fans.not_started} {_noun(fans.not_started, kind)} not started follow {to}"
    changed = [d for d in differences if d.field == "maxConcurrency"]
    if changed:
        text += "".join(f" ({d.field} {d.old} → {d.new})" for d in changed)
    return text


def refused_text(
    kind: str, step: str | None, fans: Fans, to: str, verdict: Verdict, moved_to: str | None = None
) -> str:
    """Why a migration refuses runs waiting for the children of their `kind` step `step` (or
    that a `stepMap` entry would move to the step `moved_to`)."""
    subject = "waits" if fans.runs == 1 else f"{fans.runs} runs wait"
    if moved_to is not None:
        what = f"stepMap moves it to {moved_to!r}"
    elif verdict.verdict == STRANDED:
        what = f"{to} has no step {step!r}"
    else:
        fields = [d.field for d in verdict.differences if d.field in FAN_IDENTITY]
        what = f"{to} changes its {', '.join(fields)}"
    return (
        f"{subject} for the children of {kind} step {step!r} ({fans.completed} completed,"
        f" {fans.open} running) and {what}: its children cannot be kept, and a migration never"
        " starts them again; migrate it once the step is over, or rewind it to restart the step"
    )


def _retry(retry: Retry | None) -> dict[str, Any] | None:
    if retry is None:
        return None
    return {
        "maxAttempts": retry.max_attempts,
        "initialIntervalMs": retry.initial_interval_ms,
        "backoffCoefficient": retry.backoff_coefficient,
        "maxIntervalMs": retry.max_interval_ms,
        "retryOn": list(retry.retry_on) if retry.retry_on is not None else None,
    }


def _path(path: tuple[str, ...] | None) -> str | None:
    return ".".join(path) if path is not None else None


def _fields(step: Step, workflow: str) -> dict[str, Any]:
    """What of a step a comparison looks at, JSON-able, named as the document names it."""
    kind = step.kind
    out: dict[str, Any] = {"kind": kind}
    if kind == "choice":
        out["choices"] = [{"when": repr(c.when), "next": c.next} for c in step.choices]
        out["default"] = step.default
        return out
    out["next"] = step.next
    if kind == "task":
        out["handler"] = step.push_path(workflow) if step.queue is None else None
        out["queue"] = step.queue
        out["retry"] = _retry(step.retry)
        out["timeout"] = step.timeout_ms
        out["queueTimeout"] = step.queue_timeout_ms
        out["onFailure"] = step.on_failure
    elif kind == "sleep":
        out["duration"] = {
            "ms": step.duration_ms,
            "until": step.until_ms,
            "untilPath": _path(step.until_path),
        }
    elif kind == "wait":
        out["signals"] = list(step.awaited)
        out["onSignal"] = dict(step.on_signal)
        out["timeout"] = step.timeout_ms
        out["onTimeout"] = step.on_timeout
    else:  # run, map, parallel
        out["workflow"] = [[b.name, b.workflow, b.version] for b in step.branches]
        out["inputPath"] = [_path(b.input_path) for b in step.branches]
        out["onFailure"] = step.on_failure
        out["onParentClose"] = step.on_parent_close
        if kind == "run":
            out["retry"] = _retry(step.retry)
            out["timeout"] = step.timeout_ms
        if kind == "map":
            out["itemsPath"] = _path(step.items_path)
            out["maxConcurrency"] = step.max_concurrency
            out["tolerance"] = [step.tolerated_failures, step.tolerated_failure_percentage]
    return out


def step_differences(old: Step, new: Step, old_workflow: str, new_workflow: str) -> tuple[Difference, ...]:
    """Every field of `old` that `new` has otherwise (a changed kind is one difference)."""
    if old.kind != new.kind:
        return (Difference("kind", old.kind, new.kind),)
    before, after = _fields(old, old_workflow), _fields(new, new_workflow)
    return tuple(
        Difference(name, before.get(name), after.get(name))
        for name in before
        if before.get(name) != after.get(name)
    )


def step_verdict(old: Definition | None, new: Definition, step: str | None) -> Verdict:
    """How a run standing at `step` of `old` fares at the same step of `new`."""
    if step is None:
        return Verdict(COMPATIBLE)
    target = new.index.get(step)
    if target is None:
        return Verdict(STRANDED)
    before = old.index.get(step) if old is not None else None
    if before is None:  # the run's own version lacks it (it was moved here by a rewind): compare nothing
        return Verdict(COMPATIBLE)
    diffs = step_differences(before, target, old.name if old is not None else new.name, new.name)
    return Verdict(MOVES, diffs) if diffs else Verdict(COMPATIBLE)
