"""The JSON Schema of a workflow definition, made from the models `parse_definition`
structures a document into (`DefinitionSpec`, `StepSpec`, ...), its table of the members
each step type takes (`_ALLOWED`) and its step types (`STEP_KINDS`): a step type or member
added there is in the schema too. Served at `GET /schemas/workflow.json` (editors validate a
YAML or JSON definition with it) and in `/openapi.json` as `Workflow`.

The schema says what a document may hold, member by member; the rules that span members
(a `next` names a step that exists, a sleep takes one of three members, ...) are checked at
registration, which names the field of the first problem (docs/api.md).
"""

from __future__ import annotations

from typing import Any, Final

from ..shapes import Refinements, schema_of
from . import definition as d

NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
NAME: Final = {"type": "string", "pattern": NAME_PATTERN}
# A step a transition may go to: a step's name or one of the sentinels.
TARGET: Final = {"type": "string", "pattern": r"^(\$end|\$fail|\$stuck|[A-Za-z0-9][A-Za-z0-9_.-]{0,127})$"}
DURATION: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": r"^([0-9]+d)?([0-9]+h)?([0-9]+m(?!s))?([0-9]+s)?([0-9]+ms)?$",
    "examples": ["30s", "1h30m", "500ms"],
}
TIMESTAMP: Final = {
    "type": "string",
    "pattern": (
        r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
        r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
    ),
    "examples": ["2026-11-29T18:00:00Z"],
}

# What the types cannot say; a member not named here is published with its type alone.
REFINE: Final[Refinements] = {
    (d.DefinitionSpec, "name"): NAME,
    (d.DefinitionSpec, "run_timeout"): DURATION,
    (d.DefinitionSpec, "steps"): {"minItems": 1},
    (d.DefaultsSpec, "timeout"): DURATION,
    (d.RetrySpec, "max_attempts"): {"minimum": 1, "maximum": d.MAX_ATTEMPTS_CAP},
    (d.RetrySpec, "initial_interval"): DURATION,
    (d.RetrySpec, "max_interval"): DURATION,
    (d.RetrySpec, "backoff_coefficient"): {"minimum": 1.0, "maximum": 100.0},
    (d.RetrySpec, "retry_on"): {"items": {"type": "string", "minLength": 1, "maxLength": 128}},
    (d.StepSpec, "name"): NAME,
    (d.StepSpec, "type"): {"enum": list(d.STEP_KINDS)},
    (d.StepSpec, "next"): TARGET,
    (d.StepSpec, "on_failure"): TARGET,
    (d.StepSpec, "on_timeout"): TARGET,
    (d.StepSpec, "default"): TARGET,
    (d.StepSpec, "timeout"): DURATION,
    (d.StepSpec, "queue_timeout"): DURATION,
    (d.StepSpec, "duration"): DURATION,
    (d.StepSpec, "until"): TIMESTAMP,
    (d.StepSpec, "queue"): NAME,
    (d.StepSpec, "signal"): NAME,
    (d.StepSpec, "signals"): {"items": NAME, "minItems": d.MIN_SIGNALS, "maxItems": d.MAX_SIGNALS},
    (d.StepSpec, "on_signal"): {"propertyNames": NAME, "additionalProperties": TARGET},
    (d.StepSpec, "handler"): {"pattern": "^/", "maxLength": d.MAX_HANDLER_PATH},
    (d.StepSpec, "workflow"): NAME,
    (d.StepSpec, "version"): {"minimum": 1},
    (d.StepSpec, "on_parent_close"): {"enum": list(d.ON_PARENT_CLOSE)},
    (d.StepSpec, "max_concurrency"): {"minimum": 1, "maximum": d.MAX_CONCURRENCY},
    (d.StepSpec, "tolerated_failures"): {"minimum": 0},
    (d.StepSpec, "tolerated_failure_percentage"): {"minimum": 0, "maximum": 100},
    (d.StepSpec, "branches"): {"minItems": d.MIN_BRANCHES, "maxItems": d.MAX_BRANCHES},
    (d.StepSpec, "fail_error"): {
        "properties": {
            "class": {"type": "string", "minLength": 1, "maxLength": d.MAX_ERROR_CLASS},
            "message": {"type": ["string", "null"], "maxLength": d.MAX_ERROR_MESSAGE},
        },
        "required": ["class"],
        "additionalProperties": False,
        "description": (
            "the run's error when it goes to $fail from this step "
            "(the failure that led there is kept as its cause)"
        ),
    },
    (d.BranchSpec, "name"): NAME,
    (d.BranchSpec, "workflow"): NAME,
    (d.BranchSpec, "version"): {"minimum": 1},
    (d.ConcurrencySpec, "limit"): {"minimum": 1, "maximum": d.MAX_CONCURRENCY_LIMIT},
    (d.ChoiceSpec, "next"): TARGET,
    (d.ChoiceSpec, "when"): {"type": "object", "description": "a predicate (docs/api.md, Choice predicates)"},
}

# The members a step type needs besides `name` and `type` (registration says which is missing).
NEEDS: Final[dict[str, dict[str, Any]]] = {
    "sleep": {"oneOf": [{"required": ["duration"]}, {"required": ["until"]}, {"required": ["untilPath"]}]},
    "wait": {"oneOf": [{"required": ["signal"]}, {"required": ["signals"]}]},
    "choice": {"required": ["choices"]},
    "run": {"required": ["workflow"]},
    "map": {"required": ["workflow", "itemsPath"]},
    "parallel": {"required": ["branches"]},
}


def workflow_schemas(defs: dict[str, Any], ref_prefix: str = "#/components/schemas/") -> dict[str, Any]:
    """Put the definition's models into `defs` (named by class); the reference to the root."""
    root = schema_of(d.DefinitionSpec, REFINE, defs, ref_prefix)
    step = defs["StepSpec"]
    step["allOf"] = [
        {
            "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
            "then": {
                "propertyNames": {"enum": ["name", "type", *sorted(d._ALLOWED.get(kind, ()))]},
                **NEEDS.get(kind, {}),
            },
        }
        for kind in d.STEP_KINDS
    ]
    step["description"] = f"One step: its type ({', '.join(d.STEP_KINDS)}) says which members it takes."
    defs["DefinitionSpec"]["description"] = "A workflow definition (docs/api.md, Workflows)."
    return root


def workflow_json_schema() -> dict[str, Any]:
    """The definition's JSON Schema on its own (2020-12), for `GET /schemas/workflow.json`."""
    defs: dict[str, Any] = {}
    root = workflow_schemas(defs, "#/$defs/")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Foliot workflow definition",
        **root,
        "$defs": defs,
    }
