"""What a registration warns about, as data (`foliot.core.workflow.advice`)."""

from __future__ import annotations

from foliot.core.workflow.advice import child_workflows, registration_warnings
from foliot.core.workflow.definition import parse_definition


def test_a_push_timeout_over_the_cap_is_named_with_the_member_that_set_it() -> None:
    d = parse_definition(
        {
            "name": "w",
            "defaults": {"timeout": "2m"},
            "steps": [
                {"name": "a", "type": "task"},  # 2m from the defaults
                {"name": "b", "type": "task", "timeout": "10s"},
                {"name": "c", "type": "task", "timeout": "1h", "queue": "q"},  # pulled: no cap
                {"name": "d", "type": "task", "timeout": "31s"},
            ],
        }
    )
    warnings = registration_warnings(d, missing=(), sync_task_max_ms=30_000)
    assert [(w.code, w.step, w.field) for w in warnings] == [
        ("timeout_over_sync_cap", "a", "defaults.timeout"),
        ("timeout_over_sync_cap", "d", "steps[3].timeout"),
    ]
    assert registration_warnings(d, missing=(), sync_task_max_ms=120_000) == []


def test_child_workflows_not_registered_are_named_by_step_and_field() -> None:
    d = parse_definition(
        {
            "name": "w",
            "steps": [
                {"name": "one", "type": "run", "workflow": "a", "version": 2},
                {"name": "all", "type": "map", "itemsPath": "input.xs", "workflow": "b"},
                {
                    "name": "both",
                    "type": "parallel",
                    "branches": [{"name": "x", "workflow": "a"}, {"name": "y", "workflow": "b"}],
                },
            ],
        }
    )
    assert child_workflows(d) == [("a", 2), ("b", None), ("a", None)]
    warnings = registration_warnings(d, missing=[("b", None)], sync_task_max_ms=30_000)
    assert [(w.step, w.field) for w in warnings] == [
        ("all", "steps[1].workflow"),
        ("both", "steps[2].branches[1].workflow"),
    ]
    assert "workflow 'b', which is not registered" in warnings[0].message
