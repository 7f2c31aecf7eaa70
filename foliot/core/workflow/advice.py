"""What a registration warns about: a definition that is valid but will not do what it says.

`registration_warnings` is pure: the caller resolves which child workflows exist and passes the
synchronous push cap. A warning never refuses the registration (a child workflow may be
registered later; a handler may answer 202 within the cap); it names the step and the field.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from .definition import CHILD_KINDS, Definition, Step


@attrs.frozen
class RegistrationWarning:
    code: str
    step: str
    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "step": self.step, "field": self.field, "message": self.message}


def child_workflows(definition: Definition) -> list[tuple[str, int | None]]:
    """The (workflow, version) pairs the definition's run, map and parallel steps start."""
    seen: list[tuple[str, int | None]] = []
    for step in definition.steps:
        if step.kind in CHILD_KINDS:
            for branch in step.branches:
                if (branch.workflow, branch.version) not in seen:
                    seen.append((branch.workflow, branch.version))
    return seen


def over_sync_cap(step: Step, sync_task_max_ms: int) -> bool:
    """A push step (a task without `queue`) whose timeout the synchronous push never reaches."""
    return (
        step.kind == "task"
        and step.queue is None
        and step.timeout_ms is not None
        and step.timeout_ms > sync_task_max_ms
    )


def sync_cap_text(step: Step, sync_task_max_ms: int) -> str:
    return (
        f"step {step.name!r} has a timeout of {step.timeout_ms} ms but a synchronous push is cut at"
        f" FOLIOT_SYNC_TASK_MAX_MS ({sync_task_max_ms} ms): a handler that needs longer must answer"
        " 202 and complete the task through the API, or the step should take a `queue`"
    )


def registration_warnings(
    definition: Definition, *, missing: Collection[tuple[str, int | None]], sync_task_max_ms: int
) -> list[RegistrationWarning]:
    """`missing`: the (workflow, version) pairs of `child_workflows` that do not exist now."""
    out: list[RegistrationWarning] = []
    for i, step in enumerate(definition.steps):
        at = f"steps[{i}]"
        if step.kind in CHILD_KINDS:
            for j, branch in enumerate(step.branches):
                if (branch.workflow, branch.version) not in missing:
                    continue
                which = f"version {branch.version} of " if branch.version is not None else ""
                field = f"{at}.branches[{j}].workflow" if step.kind == "parallel" else f"{at}.workflow"
                text = (
                    f"step {step.name!r} starts {which}workflow {branch.workflow!r}, which is not"
                    " registered: register it before a run reaches the step, or the step fails with"
                    " workflow_not_found"
                )
                out.append(RegistrationWarning("child_workflow_missing", step.name, field, text))
        if over_sync_cap(step, sync_task_max_ms):
            text = sync_cap_text(step, sync_task_max_ms)
            field = f"{at}.timeout" if _own(definition, i, "timeout") else "defaults.timeout"
            out.append(RegistrationWarning("timeout_over_sync_cap", step.name, field, text))
    return out


def _own(definition: Definition, index: int, member: str) -> bool:
    """Whether step `index` of the registered document sets `member` itself (else a default)."""
    steps = definition.document.get("steps")
    return isinstance(steps, list) and isinstance(steps[index], dict) and member in steps[index]
