"""The hand-written run document codec (`model.run_to_dict`, `model.replace_run`) agrees with
cattrs' and attrs' generic ones on every field, nested records included."""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs
import pytest

from foliot.core.workflow.model import (
    BufferedSignal,
    ErrorInfo,
    HeldOutcome,
    Run,
    ScheduleRef,
    TaskRef,
    Timer,
    replace_run,
    run_from_dict,
    run_to_dict,
)

BARE = Run("run_1", "app", "wf", 1, "running", None, {}, 1, 10, 20, "trace")
FULL = Run(
    "run_2",
    "app",
    "wf",
    3,
    "paused",
    {"order": [1, {"x": None}]},
    {"reserve": {"id": "R-1"}, "pay": [1.5, "two"]},
    2,
    10,
    20,
    "trace",
    business_key="order-7",
    current_step="pay",
    attempt=2,
    wait_signal=None,
    wait_signals=("paid", "cancelled"),
    wake_at=99,
    deadline=1000,
    run_timeout_ms=990,
    closed_at=None,
    error=ErrorInfo("pay", "refunded", "paid back", cause=ErrorInfo("charge", "declined", "no", "refund")),
    task=TaskRef("tt_1", "pay", 2, 2, "work", 500, accepted=True, claimed_by="w-1"),
    timer=Timer("retry", 77, "2:pay:3#4"),
    carried_error=ErrorInfo(None, "failed_by_definition", "no"),
    compensating=ErrorInfo("charge", "declined", "no", compensated_by="refund"),
    buffer=(BufferedSignal("paid", {"total": 5}, "s-1", 15), BufferedSignal("other", None, None)),
    armings=4,
    step_since=12,
    paused_from="running",
    held=HeldOutcome("failed", 30, next="ship", error=ErrorInfo("pay", "timeout", "late"), retryable=True),
    schedule=ScheduleRef("nightly", 1_767_225_600_000),
    priority=1,
    seq=42,
)
HELD_BARE = attrs.evolve(BARE, held=HeldOutcome("completed", 30))


@pytest.mark.parametrize("run", [BARE, FULL, HELD_BARE], ids=["bare", "full", "held"])
def test_run_to_dict_is_cattrs_unstructure(run: Run) -> None:
    mine, theirs = run_to_dict(run), cattrs.Converter().unstructure(run)
    assert mine == theirs
    assert json.dumps(mine, sort_keys=True) == json.dumps(theirs, sort_keys=True)
    assert run_from_dict(json.loads(json.dumps(mine))) == run


@pytest.mark.parametrize(
    "changes",
    [{}, {"seq": 43}, {"status": "waiting", "task": None, "state": {"a": 1}}, {"held": None, "buffer": ()}],
)
def test_replace_run_is_attrs_evolve(changes: dict[str, Any]) -> None:
    assert replace_run(FULL, changes) == attrs.evolve(FULL, **changes)
    with pytest.raises(TypeError):
        replace_run(FULL, {"no_such_field": 1})


def test_the_stored_text_of_a_large_input_is_reused_and_equal() -> None:
    import json as _json

    from foliot.core.workflow.model import replace_run as _replace
    from foliot.storage.base import json_dumps, run_json

    big = {"items": [{"n": i} for i in range(500)]}
    run = _replace(FULL, {"input": big})
    first = run_json(run)
    assert _json.loads(first) == _json.loads(json_dumps(run_to_dict(run)))
    moved = _replace(run, {"seq": run.seq + 1, "state": {"x": 1}})
    assert _json.loads(run_json(moved)) == _json.loads(json_dumps(run_to_dict(moved)))
    changed = _replace(moved, {"input": {"items": []}})  # a new input object: encoded anew
    assert _json.loads(run_json(changed))["input"] == {"items": []}
    small = _replace(FULL, {"input": {"a": 1}})
    assert run_json(small) == json_dumps(run_to_dict(small))
