"""Per-app limits (issue 37): each has a node-wide default (a setting) and may be overridden for
one app by the admin (`PUT /admin/apps/{app}/limits`, stored in `app_limits`).

`parse_overrides` checks an override body (400 naming the member; nothing is stored on any
fault); `effective` gives an app's limits, each with where it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .config import Settings
from .errors import InvalidRequest

# An override's largest value: far above any default, small enough for every store and JSON.
MAX_OVERRIDE: Final = 1_000_000_000


@attrs.frozen
class Limit:
    name: str  # the member of the admin API
    setting: str  # the environment variable of its default
    field: str  # the `Settings` attribute of its default
    integer: bool = True  # else a number above 0


LIMITS: Final[tuple[Limit, ...]] = (
    Limit("maxOpenRuns", "FOLIOT_APP_MAX_OPEN_RUNS", "app_max_open_runs"),
    Limit("maxTreeRuns", "FOLIOT_MAX_TREE_RUNS", "max_tree_runs"),
    Limit("internalRate", "FOLIOT_APP_INTERNAL_RATE", "app_internal_rate"),
    Limit("internalBurst", "FOLIOT_APP_INTERNAL_BURST", "app_internal_burst"),
    Limit("schedules", "FOLIOT_SCHEDULES_PER_APP", "schedules_per_app"),
    Limit(
        "scheduleFireRate", "FOLIOT_SCHEDULE_FIRE_RATE_PER_APP", "schedule_fire_rate_per_app", integer=False
    ),
    Limit("dryRunConcurrency", "FOLIOT_DRYRUN_CONCURRENCY", "dryrun_concurrency"),
)
BY_NAME: Final = {limit.name: limit for limit in LIMITS}

Overrides = Mapping[str, int | float]


@attrs.frozen
class AppLimits:
    """An app's effective limits: the settings' values with its overrides applied."""

    max_open_runs: int
    max_tree_runs: int
    internal_rate: int
    internal_burst: int
    schedules: int
    schedule_fire_rate: float
    dry_run_concurrency: int
    overrides: Overrides = attrs.field(factory=dict)

    def source(self, name: str) -> str:
        """Where limit `name` comes from: `override` or `default`."""
        return "override" if name in self.overrides else "default"

    def setting(self, name: str) -> str:
        """How a refusal names limit `name`: its setting, or the app's override of it."""
        found = BY_NAME[name]
        return f"override {name}" if name in self.overrides else found.setting


def effective(settings: Settings, overrides: Overrides | None = None) -> AppLimits:
    given = dict(overrides or {})

    def value(name: str) -> Any:
        return given[name] if name in given else getattr(settings, BY_NAME[name].field)

    return AppLimits(
        max_open_runs=int(value("maxOpenRuns")),
        max_tree_runs=int(value("maxTreeRuns")),
        internal_rate=int(value("internalRate")),
        internal_burst=int(value("internalBurst")),
        schedules=int(value("schedules")),
        schedule_fire_rate=float(value("scheduleFireRate")),
        dry_run_concurrency=int(value("dryRunConcurrency")),
        overrides=given,
    )


def value_of(limits: AppLimits, name: str) -> int | float:
    return {
        "maxOpenRuns": limits.max_open_runs,
        "maxTreeRuns": limits.max_tree_runs,
        "internalRate": limits.internal_rate,
        "internalBurst": limits.internal_burst,
        "schedules": limits.schedules,
        "scheduleFireRate": limits.schedule_fire_rate,
        "dryRunConcurrency": limits.dry_run_concurrency,
    }[name]


def parse_overrides(raw: Any, current: Overrides) -> dict[str, int | float]:
    """The app's overrides after applying body `raw` to `current`: a member sets its override,
    `null` removes it, an absent one is unchanged. Raises `InvalidRequest` naming the member at
    fault (an unknown member, a value not an integer / a number above 0, out of range)."""
    if not isinstance(raw, dict):
        raise InvalidRequest("the request body must be a JSON object")
    after = dict(current)
    for name, value in raw.items():
        limit = BY_NAME.get(name)
        if limit is None:
            known = ", ".join(BY_NAME)
            raise InvalidRequest(f"is not a limit (one of {known})", field=str(name))
        if value is None:
            after.pop(name, None)
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            kind = "an integer" if limit.integer else "a number"
            raise InvalidRequest(f"must be {kind} or null", field=name)
        if limit.integer:
            if isinstance(value, float):
                if not value.is_integer():
                    raise InvalidRequest("must be an integer or null", field=name)
                value = int(value)
            if not 1 <= value <= MAX_OVERRIDE:
                raise InvalidRequest(f"must be 1..{MAX_OVERRIDE}", field=name)
            after[name] = int(value)
        else:
            if not math.isfinite(value) or not 0 < value <= MAX_OVERRIDE:
                raise InvalidRequest(f"must be a number above 0, at most {MAX_OVERRIDE}", field=name)
            after[name] = float(value)
    return after


def view(limits: AppLimits) -> dict[str, Any]:
    """`GET /admin/apps/{app}/limits`: each limit's value, setting and source."""
    return {
        limit.name: {
            "value": value_of(limits, limit.name),
            "source": limits.source(limit.name),
            "setting": limit.setting,
        }
        for limit in LIMITS
    }
