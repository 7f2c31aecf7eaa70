"""Timeouts and timers as data: the deadlines an execution needs armed, derived from its state.

`deadlines(execution)` maps a key to its due time (epoch ms). The runtime arms exactly these
(the machine reports the difference after each transition as `ArmDeadline`/`CancelDeadline`
effects) and, once one is due, hands the key back as a `Fire(key)` message. A key names one
arming: it embeds the event id that opened the thing it guards (a decision task's or activity's
scheduled event, a timer's started event), so a key can never match a later arming. A firing
whose key is no longer in `deadlines`, or not yet due there (a heartbeat moved it), is stale
and changes nothing.

Keys:
- `workflow` — the execution's start-to-close timeout (one year when it is NONE);
- `decision:<scheduledEventId>:START_TO_CLOSE` / `:SCHEDULE_TO_START` (sticky task list only);
- `activity:<scheduledEventId>:SCHEDULE_TO_START | SCHEDULE_TO_CLOSE | START_TO_CLOSE | HEARTBEAT`;
- `lambda:<scheduledEventId>:START_TO_CLOSE`;
- `timer:<startedEventId>` — a StartTimer timer firing (not a timeout, same mechanism).
"""

from __future__ import annotations

from typing import Final

from .model import Execution

NONE: Final = "NONE"
MAX_EXECUTION_SECONDS: Final = 365 * 24 * 3600  # SWF's one-year cap on an execution
LAMBDA_DEFAULT_START_TO_CLOSE: Final = "900"  # SWF's default, also its maximum
_MAX_DIGITS: Final = 8  # DurationInSeconds is at most 8 characters


def parse_seconds(value: str, *, allow_none: bool = True) -> int | None:
    """A duration string as whole seconds; `None` for `NONE` (no timeout).

    Raises `ValueError` for anything else: SWF durations are ASCII digits, at most 8."""
    if value == NONE:
        if allow_none:
            return None
        raise ValueError("NONE is not allowed here")
    if not value or len(value) > _MAX_DIGITS or not all("0" <= ch <= "9" for ch in value):
        raise ValueError(f"not a duration in seconds: {value!r}")
    return int(value)


def is_duration(value: str, *, allow_none: bool = True) -> bool:
    try:
        parse_seconds(value, allow_none=allow_none)
    except ValueError:
        return False
    return True


def _after(start: int, duration: str) -> int | None:
    seconds = parse_seconds(duration)
    return None if seconds is None else start + seconds * 1000


def deadlines(ex: Execution) -> dict[str, int]:
    """Every deadline the execution needs armed now, by key. A closed execution needs none."""
    out: dict[str, int] = {}
    if not ex.is_open:
        return out
    # NONE (allowed for children and continued runs) still meets SWF's one-year cap.
    workflow_due = _after(ex.started_at, ex.config.execution_start_to_close_timeout)
    out["workflow"] = (
        workflow_due if workflow_due is not None else ex.started_at + MAX_EXECUTION_SECONDS * 1000
    )
    task = ex.decision
    if task is not None:
        prefix = f"decision:{task.scheduled_event_id}"
        if task.started_at is None:
            if task.schedule_to_start_timeout is not None:
                due = _after(task.scheduled_at, task.schedule_to_start_timeout)
                if due is not None:
                    out[f"{prefix}:SCHEDULE_TO_START"] = due
        else:
            due = _after(task.started_at, task.start_to_close_timeout)
            if due is not None:
                out[f"{prefix}:START_TO_CLOSE"] = due
    for act in ex.activities:
        prefix = f"activity:{act.scheduled_event_id}"
        due = _after(act.scheduled_at, act.schedule_to_close_timeout)
        if due is not None:
            out[f"{prefix}:SCHEDULE_TO_CLOSE"] = due
        if act.started_at is None:
            due = _after(act.scheduled_at, act.schedule_to_start_timeout)
            if due is not None:
                out[f"{prefix}:SCHEDULE_TO_START"] = due
        else:
            due = _after(act.started_at, act.start_to_close_timeout)
            if due is not None:
                out[f"{prefix}:START_TO_CLOSE"] = due
            beat = act.last_heartbeat_at if act.last_heartbeat_at is not None else act.started_at
            due = _after(beat, act.heartbeat_timeout)
            if due is not None:
                out[f"{prefix}:HEARTBEAT"] = due
    for fn in ex.lambdas:
        if fn.started_at is not None:
            due = _after(fn.started_at, fn.start_to_close_timeout)
            if due is not None:
                out[f"lambda:{fn.scheduled_event_id}:START_TO_CLOSE"] = due
    for timer in ex.timers:
        out[f"timer:{timer.started_event_id}"] = timer.fire_at
    return out


def parse_key(key: str) -> tuple[str, int, str] | None:
    """`activity:12:HEARTBEAT` -> ("activity", 12, "HEARTBEAT"); `workflow` -> ("workflow", 0,
    "START_TO_CLOSE"); `timer:7` -> ("timer", 7, ""). `None` for a malformed key."""
    if key == "workflow":
        return ("workflow", 0, "START_TO_CLOSE")
    parts = key.split(":")
    if len(parts) not in (2, 3) or not parts[1].isascii() or not parts[1].isdigit():
        return None
    kind, event_id = parts[0], int(parts[1])
    if kind == "timer" and len(parts) == 2:
        return (kind, event_id, "")
    if kind in ("decision", "activity", "lambda") and len(parts) == 3:
        return (kind, event_id, parts[2])
    return None
