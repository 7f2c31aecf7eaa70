"""Workflow definitions: the JSON document, validated, and its compiled form.

`parse_definition(raw)` checks every rule of SPEC §3 and raises `ValidationError` naming the
path of the first problem. The compiled `Definition` carries milliseconds and resolved `next`
targets, so the machine never re-interprets text.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Final
from urllib.parse import unquote

import attrs

from .duration import DurationError, parse_duration, parse_timestamp
from .flow import RateLimit, check_priority, parse_rate_limit
from .jsonconv import ValidationError, camel, is_name, structure
from .predicate import Predicate, PredicateError, parse_path, parse_predicate

END: Final = "$end"
FAIL: Final = "$fail"
STUCK: Final = "$stuck"
SENTINELS: Final = frozenset({END, FAIL, STUCK})
STEP_KINDS: Final = ("task", "sleep", "wait", "choice", "run", "map", "parallel")
CHILD_KINDS: Final = frozenset({"run", "map", "parallel"})  # steps that wait for child runs
ON_PARENT_CLOSE: Final = ("cancel", "abandon")
MAX_DEPTH: Final = 8  # a run's children may nest this deep below it (a top-level run is depth 0)
MAX_ITEMS: Final = 10_000  # items of one map step
MAX_CONCURRENCY: Final = 1_000
DEFAULT_MAP_CONCURRENCY: Final = 10
MAX_ERROR_CLASS: Final = 128  # a failError's class, as a task's error class
MAX_ERROR_MESSAGE: Final = 2048
MIN_BRANCHES: Final = 2
MAX_BRANCHES: Final = 20

DEFAULT_TIMEOUT_MS: Final = 30_000
DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_INITIAL_INTERVAL_MS: Final = 1_000
DEFAULT_BACKOFF: Final = 2.0
DEFAULT_MAX_INTERVAL_MS: Final = 60_000
MAX_ATTEMPTS_CAP: Final = 1000
MAX_HANDLER_PATH: Final = 1024
MIN_SIGNALS: Final = 2  # a first-of-N wait names 2..20 distinct signals
MAX_SIGNALS: Final = 20
# RFC 3986 path characters: unreserved, sub-delims, ':', '@', '/' and %XX escapes. No '?', '#',
# '\\', spaces, controls or raw non-ASCII.
_PATH_CHARS: Final = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")


@attrs.frozen
class RetrySpec:
    max_attempts: int | None = None
    initial_interval: str | None = None
    backoff_coefficient: float | None = None
    max_interval: str | None = None
    retry_on: tuple[str, ...] | None = None


@attrs.frozen
class DefaultsSpec:
    timeout: str | None = None
    retry: RetrySpec | None = None


@attrs.frozen
class ChoiceSpec:
    when: Any
    next: str


@attrs.frozen
class BranchSpec:
    name: str
    workflow: str
    version: int | None = None
    input_path: str | None = None


@attrs.frozen
class StepSpec:
    name: str
    type: str
    next: str | None = None
    on_failure: str | None = None
    retry: RetrySpec | None = None
    timeout: str | None = None
    queue: str | None = None
    queue_timeout: str | None = None
    handler: str | None = None
    duration: str | None = None
    until: str | None = None
    until_path: str | None = None
    signal: str | None = None
    signals: tuple[str, ...] | None = None
    on_signal: dict[str, Any] | None = None
    on_timeout: str | None = None
    choices: tuple[ChoiceSpec, ...] | None = None
    default: str | None = None
    workflow: str | None = None
    version: int | None = None
    input_path: str | None = None
    on_parent_close: str | None = None
    items_path: str | None = None
    max_concurrency: int | None = None
    tolerated_failures: int | None = None
    tolerated_failure_percentage: float | None = None
    branches: tuple[BranchSpec, ...] | None = None
    priority: Any = None  # a task step: 1 (highest)..5, else the run's (issue 23)
    rate_limit: dict[str, Any] | None = None  # a task step: {limit, period, key} (issue 23)
    concurrency: ConcurrencySpec | None = None  # a task step: {limit, key}
    fail_error: dict[str, Any] | None = None  # {class, message?}: the run's error when it goes to $fail


@attrs.frozen
class ConcurrencySpec:
    limit: int
    key: str | None = None


@attrs.frozen
class DefinitionSpec:
    name: str
    steps: tuple[StepSpec, ...]
    run_timeout: str | None = None
    defaults: DefaultsSpec | None = None
    output: str | None = None
    concurrency: ConcurrencySpec | None = None


# Which optional fields each kind of step may carry (camelCase, as the document spells them).
_ALLOWED: Final = {
    "task": {
        "next",
        "onFailure",
        "retry",
        "timeout",
        "queue",
        "queueTimeout",
        "handler",
        "priority",
        "rateLimit",
        "concurrency",
        "failError",
    },
    "sleep": {"next", "duration", "until", "untilPath", "failError"},
    "wait": {"next", "signal", "signals", "onSignal", "timeout", "onTimeout", "failError"},
    "choice": {"choices", "default", "failError"},
    "run": {
        "next",
        "onFailure",
        "retry",
        "timeout",
        "workflow",
        "version",
        "inputPath",
        "onParentClose",
        "failError",
    },
    "map": {
        "next",
        "onFailure",
        "workflow",
        "version",
        "itemsPath",
        "maxConcurrency",
        "toleratedFailures",
        "toleratedFailurePercentage",
        "onParentClose",
        "failError",
    },
    "parallel": {"next", "onFailure", "branches", "onParentClose", "failError"},
}
_OPTIONAL_FIELDS: Final = tuple(a.name for a in attrs.fields(StepSpec) if a.name not in ("name", "type"))


@attrs.frozen
class Retry:
    max_attempts: int
    initial_interval_ms: int
    backoff_coefficient: float
    max_interval_ms: int
    retry_on: tuple[str, ...] | None

    def backoff_ms(self, attempt: int) -> int:
        """Delay before the attempt after `attempt`: min(initial * coef^(attempt-1), max)."""
        delay = self.initial_interval_ms * (self.backoff_coefficient ** (attempt - 1))
        return int(min(delay, self.max_interval_ms))

    def allows(self, attempt: int, error_class: str, retryable: bool) -> bool:
        if not retryable or attempt >= self.max_attempts:
            return False
        return self.retry_on is None or error_class in self.retry_on


@attrs.frozen
class Choice:
    when: Predicate
    next: str


@attrs.frozen
class Branch:
    """One branch of a parallel step (for a run or map step: the one child workflow)."""

    name: str
    workflow: str
    version: int | None = None  # None: the latest when the step starts
    input_path: tuple[str, ...] | None = None  # None: the parent's input


@attrs.frozen
class FailError:
    """A step's `failError`: the run's error class and message when it goes to `$fail` from it."""

    cls: str
    message: str = ""


@attrs.frozen
class Step:
    name: str
    kind: str
    next: str
    on_failure: str | None = None
    timeout_ms: int | None = None
    retry: Retry | None = None
    queue: str | None = None
    queue_timeout_ms: int | None = None  # a queued attempt nobody claimed by then fails
    handler: str | None = None
    duration_ms: int | None = None
    until_ms: int | None = None
    until_path: tuple[str, ...] | None = None
    signal: str | None = None
    signals: tuple[str, ...] = ()  # a first-of-N wait: the first of these to arrive wins
    on_signal: tuple[tuple[str, str], ...] = ()  # (signal, next step) for a first-of-N wait
    on_timeout: str | None = None
    choices: tuple[Choice, ...] = ()
    default: str | None = None
    # run, map and parallel: the child workflows (a run or map step has one, named after it)
    branches: tuple[Branch, ...] = ()
    on_parent_close: str = "cancel"
    items_path: tuple[str, ...] | None = None
    max_concurrency: int = DEFAULT_MAP_CONCURRENCY
    tolerated_failures: int | None = None
    tolerated_failure_percentage: float | None = None
    priority: int | None = None  # a task step's own priority; None: the run's
    rate_limit: RateLimit | None = None  # a task step's sends spaced to this
    concurrency: Concurrency | None = None  # a task step: at most `limit` runs at it per key value
    fail_error: FailError | None = None  # the run's error when it goes to $fail from this step

    def tolerance(self, total: int) -> int:
        """How many of a map's `total` children may fail and the step still complete."""
        allowed = 0
        if self.tolerated_failures is not None:
            allowed = self.tolerated_failures
        if self.tolerated_failure_percentage is not None:
            allowed = max(allowed, int(total * self.tolerated_failure_percentage / 100))
        return allowed

    @property
    def awaited(self) -> tuple[str, ...]:
        """The signals a wait step waits for (the first to arrive wins)."""
        return (self.signal,) if self.signal is not None else self.signals

    def after_signal(self, name: str) -> str:
        """Where a wait step goes once `name` arrived: its `onSignal` entry, else `next`."""
        return next((target for signal, target in self.on_signal if signal == name), self.next)

    def push_path(self, workflow: str) -> str:
        """Where a push of this task step goes, below the app's handlerBaseUrl."""
        return self.handler or f"/foliot/{workflow}/{self.name}"


MAX_CONCURRENCY_LIMIT: Final = 100_000


@attrs.frozen
class Concurrency:
    """A workflow's `concurrency`: at most `limit` of its runs active per value of `key` (a path
    into `{input, state}`; None: one limit for the whole workflow)."""

    limit: int
    key: tuple[str, ...] | None = None


@attrs.frozen
class Definition:
    name: str
    steps: tuple[Step, ...]
    run_timeout_ms: int | None
    document: dict[str, Any] = attrs.field(eq=False)
    index: dict[str, Step] = attrs.field(eq=False)
    output: tuple[str, ...] | None = None  # the path of the run's output; None: its whole state
    concurrency: Concurrency | None = None  # at most `limit` open runs per key value

    def step(self, name: str) -> Step:
        return self.index[name]

    def concurrency_for(self, key: str) -> Concurrency | None:
        """The `concurrency` a run's slot key was made from: the workflow's (`<workflow>/<value>`)
        or a task step's (`<workflow>#<step>/<value>`)."""
        head = key.partition("/")[0]
        if "#" not in head:
            return self.concurrency
        step = self.index.get(head.partition("#")[2])
        return step.concurrency if step is not None else None

    def slot_limit(self, key: str) -> int:
        """How many runs may hold a slot of `key` at once under this definition (1 when the
        `concurrency` the key was made from is gone from it)."""
        concurrency = self.concurrency_for(key)
        return concurrency.limit if concurrency is not None else 1

    def has_target(self, name: str) -> bool:
        return name in SENTINELS or name in self.index

    @property
    def first(self) -> Step:
        return self.steps[0]

    def canonical(self) -> str:
        """The document as canonical JSON: equal documents, equal text."""
        return canonical_json(self.document)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _duration(text: str | None, field: str, *, positive: bool = True) -> int | None:
    if text is None:
        return None
    try:
        ms = parse_duration(text)
    except DurationError as exc:
        raise ValidationError(field, str(exc)) from None
    if positive and ms <= 0:
        raise ValidationError(field, "must be longer than zero")
    return ms


def _retry(spec: RetrySpec | None, defaults: RetrySpec | None, field: str) -> Retry:
    def pick(attr: str) -> tuple[Any, str]:
        own = getattr(spec, attr) if spec is not None else None
        if own is not None:
            return own, f"{field}.retry"
        inherited = getattr(defaults, attr) if defaults is not None else None
        return inherited, "defaults.retry"

    max_attempts, where = pick("max_attempts")
    if max_attempts is None:
        max_attempts = DEFAULT_MAX_ATTEMPTS
    elif not 1 <= max_attempts <= MAX_ATTEMPTS_CAP:
        raise ValidationError(f"{where}.maxAttempts", f"must be 1..{MAX_ATTEMPTS_CAP}")
    initial, where = pick("initial_interval")
    initial_ms = _duration(initial, f"{where}.initialInterval")
    coefficient, where = pick("backoff_coefficient")
    if coefficient is not None and not 1.0 <= coefficient <= 100.0:
        raise ValidationError(f"{where}.backoffCoefficient", "must be between 1.0 and 100.0")
    maximum, where = pick("max_interval")
    max_ms = _duration(maximum, f"{where}.maxInterval")
    retry_on, where = pick("retry_on")
    if retry_on is not None:
        for i, cls in enumerate(retry_on):
            if not cls or len(cls) > 128:
                raise ValidationError(f"{where}.retryOn[{i}]", "expected an error class name")
    return Retry(
        max_attempts=max_attempts,
        initial_interval_ms=initial_ms if initial_ms is not None else DEFAULT_INITIAL_INTERVAL_MS,
        backoff_coefficient=coefficient if coefficient is not None else DEFAULT_BACKOFF,
        max_interval_ms=max_ms if max_ms is not None else DEFAULT_MAX_INTERVAL_MS,
        retry_on=tuple(retry_on) if retry_on is not None else None,
    )


class HandlerPathError(ValueError):
    """A step `handler` that is not a plain path below the app's handlerBaseUrl."""


def check_handler_path(path: str) -> str:
    """`path` if it stays below whatever base URL it is appended to, else `HandlerPathError`.

    A path starts with one `/`, holds only RFC 3986 path characters, and none of its segments is
    `.` or `..` or decodes to something holding `/`, `\\`, `%` (double encoding) or a control
    character: `/../b`, `/%2e%2E/b`, `/a%2fb` and `/a%5c..` are all refused.
    """
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
        raise HandlerPathError("must be a path starting with a single '/' (absolute URLs are refused)")
    if len(path) > MAX_HANDLER_PATH:
        raise HandlerPathError(f"is longer than {MAX_HANDLER_PATH} characters")
    if _PATH_CHARS.fullmatch(path) is None:
        raise HandlerPathError(
            "must hold only URL path characters (no '?', '#', '\\', spaces or raw non-ASCII; "
            "percent-encode them)"
        )
    for segment in path.split("/")[1:]:
        try:
            decoded = unquote(segment, errors="strict") if "%" in segment else segment
        except UnicodeDecodeError:
            raise HandlerPathError("has a %XX escape that is not UTF-8") from None
        if decoded in (".", ".."):
            raise HandlerPathError("must not contain '.' or '..' segments (percent-encoded or not)")
        if any(c in decoded for c in "/\\%") or any(ord(c) < 32 or ord(c) == 127 for c in decoded):
            raise HandlerPathError("must not percent-encode '/', '\\', '%' or control characters")
    return path


def push_url(handler_base_url: str, path: str) -> str:
    """The URL a task is pushed to: the base URL plus a checked path, never outside the base.

    Definitions are checked when registered; this guards every push as well, so a path that
    slipped in any other way cannot reach another tenant's endpoints.
    """
    return handler_base_url.rstrip("/") + _checked_path(path)


@functools.lru_cache(maxsize=4096)
def _checked_path(path: str) -> str:
    """`check_handler_path` remembered for the paths pushes use (pure; a refused path raises
    every time, as exceptions are not cached)."""
    return check_handler_path(path)


def _handler_path(path: str, field: str) -> str:
    try:
        return check_handler_path(path)
    except HandlerPathError as exc:
        raise ValidationError(field, str(exc)) from None


_NAME_RULE: Final = "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


def _wait_signals(s: StepSpec, at: str, target: Any) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A wait step's `signal`, or its `signals` (2..20 distinct names) and `onSignal` routes."""
    if s.signal is not None and s.signals is not None:
        raise ValidationError(f"{at}.signals", "a wait step takes signal or signals, not both")
    if s.signals is None:
        if s.signal is None:
            raise ValidationError(f"{at}.signal", "required field missing (or give signals)")
        if not is_name(s.signal):
            raise ValidationError(f"{at}.signal", _NAME_RULE)
        if s.on_signal is not None:
            raise ValidationError(f"{at}.onSignal", "needs signals (a wait for one of several signals)")
        return (), ()
    if not MIN_SIGNALS <= len(s.signals) <= MAX_SIGNALS:
        raise ValidationError(f"{at}.signals", f"must name {MIN_SIGNALS}..{MAX_SIGNALS} signals")
    for j, name in enumerate(s.signals):
        if not is_name(name):
            raise ValidationError(f"{at}.signals[{j}]", _NAME_RULE)
        if name in s.signals[:j]:
            raise ValidationError(f"{at}.signals[{j}]", f"duplicate signal {name!r}")
    routes: list[tuple[str, str]] = []
    for name, step in (s.on_signal or {}).items():
        if name not in s.signals:
            raise ValidationError(f"{at}.onSignal.{name}", "not one of the step's signals")
        if not isinstance(step, str):
            raise ValidationError(f"{at}.onSignal.{name}", "expected a step name")
        if step not in SENTINELS and not is_name(step):
            raise ValidationError(f"{at}.onSignal.{name}", f"unknown step {step!r}")
        resolved = target(step, f"{at}.onSignal.{name}")
        assert resolved is not None
        routes.append((name, resolved))
    return tuple(s.signals), tuple(routes)


def parse_definition(raw: Any) -> Definition:
    """Validate a workflow document and compile it; `ValidationError` names the first problem."""
    spec = structure(raw, DefinitionSpec)
    if not is_name(spec.name):
        raise ValidationError("name", "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    run_timeout_ms = _duration(spec.run_timeout, "runTimeout")
    defaults = spec.defaults or DefaultsSpec()
    default_timeout = _duration(defaults.timeout, "defaults.timeout")
    if defaults.retry is not None:
        _retry(None, defaults.retry, "defaults")  # validates the defaults themselves
    if not spec.steps:
        raise ValidationError("steps", "a workflow needs at least one step")

    seen: dict[str, int] = {}
    for i, step in enumerate(spec.steps):
        if not is_name(step.name):
            raise ValidationError(f"steps[{i}].name", "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
        if step.name in seen:
            raise ValidationError(f"steps[{i}].name", f"duplicate step name {step.name!r}")
        seen[step.name] = i

    def target(value: str | None, field: str) -> str | None:
        if value is not None and value not in SENTINELS and value not in seen:
            raise ValidationError(field, f"unknown step {value!r}")
        return value

    compiled: list[Step] = []
    for i, s in enumerate(spec.steps):
        at = f"steps[{i}]"
        if s.type not in STEP_KINDS:
            raise ValidationError(f"{at}.type", f"unknown step type {s.type!r}; expected {list(STEP_KINDS)}")
        for attr in _OPTIONAL_FIELDS:
            key = camel(attr)
            if getattr(s, attr) is not None and key not in _ALLOWED[s.type]:
                raise ValidationError(f"{at}.{key}", f"not allowed on a {s.type} step")
        following = spec.steps[i + 1].name if i + 1 < len(spec.steps) else END
        nxt = target(s.next, f"{at}.next") or following
        common: dict[str, Any] = {"name": s.name, "kind": s.type, "next": nxt}
        if s.fail_error is not None:
            common["fail_error"] = _fail_error(s, at)
        if s.type == "task":
            if s.queue is not None and s.handler is not None:
                raise ValidationError(f"{at}.queue", "a step takes either queue or handler, not both")
            if s.queue is not None and not is_name(s.queue):
                raise ValidationError(f"{at}.queue", "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
            timeout = _duration(s.timeout, f"{at}.timeout") or default_timeout or DEFAULT_TIMEOUT_MS
            if s.queue_timeout is not None and s.queue is None:
                raise ValidationError(f"{at}.queueTimeout", "needs a queue")
            compiled.append(
                Step(
                    **common,
                    on_failure=target(s.on_failure, f"{at}.onFailure"),
                    timeout_ms=timeout,
                    retry=_retry(s.retry, defaults.retry, at),
                    queue=s.queue,
                    queue_timeout_ms=_duration(s.queue_timeout, f"{at}.queueTimeout"),
                    handler=_handler_path(s.handler, f"{at}.handler") if s.handler is not None else None,
                    priority=check_priority(s.priority, f"{at}.priority") if s.priority is not None else None,
                    rate_limit=parse_rate_limit(s.rate_limit, f"{at}.rateLimit")
                    if s.rate_limit is not None
                    else None,
                    concurrency=_step_concurrency(spec, s, at),
                )
            )
        elif s.type == "sleep":
            given = [f for f in ("duration", "until", "until_path") if getattr(s, f) is not None]
            if len(given) != 1:
                raise ValidationError(at, "a sleep step takes exactly one of duration, until, untilPath")
            until_ms = None
            if s.until is not None:
                try:
                    until_ms = parse_timestamp(s.until)
                except DurationError as exc:
                    raise ValidationError(f"{at}.until", str(exc)) from None
            until_path = None
            if s.until_path is not None:
                try:
                    until_path = parse_path(s.until_path, f"{at}.untilPath")
                except PredicateError as exc:
                    raise ValidationError(exc.field, exc.message) from None
            compiled.append(
                Step(
                    **common,
                    duration_ms=_duration(s.duration, f"{at}.duration", positive=False),
                    until_ms=until_ms,
                    until_path=until_path,
                )
            )
        elif s.type == "wait":
            signals, on_signal = _wait_signals(s, at, target)
            if s.on_timeout is not None and s.timeout is None:
                raise ValidationError(f"{at}.onTimeout", "needs a timeout")
            compiled.append(
                Step(
                    **common,
                    signal=s.signal,
                    signals=signals,
                    on_signal=on_signal,
                    timeout_ms=_duration(s.timeout, f"{at}.timeout"),
                    on_timeout=target(s.on_timeout, f"{at}.onTimeout"),
                )
            )
        elif s.type in CHILD_KINDS:
            compiled.append(_child_step(s, at, common, target))
        else:
            if not s.choices:
                raise ValidationError(f"{at}.choices", "a choice step needs at least one choice")
            choices = []
            for j, c in enumerate(s.choices):
                try:
                    when = parse_predicate(c.when, f"{at}.choices[{j}].when")
                except PredicateError as exc:
                    raise ValidationError(exc.field, exc.message) from None
                nxt_choice = target(c.next, f"{at}.choices[{j}].next")
                assert nxt_choice is not None
                choices.append(Choice(when, nxt_choice))
            compiled.append(
                Step(
                    **common,
                    choices=tuple(choices),
                    default=target(s.default, f"{at}.default"),
                )
            )
    steps = tuple(compiled)
    return Definition(
        name=spec.name,
        steps=steps,
        run_timeout_ms=run_timeout_ms,
        document=raw,
        index={s.name: s for s in steps},
        output=_path(spec.output, "output") if spec.output is not None else None,
        concurrency=_concurrency(spec.concurrency, "concurrency"),
    )


def _fail_error(s: StepSpec, at: str) -> FailError:
    """A step's `failError: {class, message?}`, on a step that can go to `$fail` (a task's
    handler may name `$fail` as its next step; other steps must have a route there)."""
    raw = s.fail_error
    field = f"{at}.failError"
    assert raw is not None
    unknown = sorted(set(raw) - {"class", "message"})
    if unknown:
        raise ValidationError(f"{field}.{unknown[0]}", "unknown field (failError takes class and message)")
    cls = raw.get("class")
    if not isinstance(cls, str) or not 1 <= len(cls) <= MAX_ERROR_CLASS or "\x00" in cls:
        raise ValidationError(
            f"{field}.class", f"expected an error class name (1..{MAX_ERROR_CLASS} characters)"
        )
    message = raw.get("message", "")
    if message is None:
        message = ""
    if not isinstance(message, str) or len(message) > MAX_ERROR_MESSAGE or "\x00" in message:
        raise ValidationError(
            f"{field}.message", f"expected a string of at most {MAX_ERROR_MESSAGE} characters"
        )
    routes = [s.next, s.on_failure, s.on_timeout, s.default, *(s.on_signal or {}).values()]
    routes += [c.next for c in s.choices or ()]
    if s.type != "task" and FAIL not in routes:
        raise ValidationError(field, 'the step never goes to $fail (none of its next steps is "$fail")')
    return FailError(cls, message)


def _step_concurrency(spec: DefinitionSpec, s: StepSpec, at: str) -> Concurrency | None:
    if s.concurrency is not None and spec.concurrency is not None:
        raise ValidationError(
            f"{at}.concurrency", "a workflow takes concurrency on itself or on its task steps, not both"
        )
    return _concurrency(s.concurrency, f"{at}.concurrency")


def _concurrency(spec: ConcurrencySpec | None, at: str) -> Concurrency | None:
    if spec is None:
        return None
    if not 1 <= spec.limit <= MAX_CONCURRENCY_LIMIT:
        raise ValidationError(f"{at}.limit", f"must be 1..{MAX_CONCURRENCY_LIMIT}")
    return Concurrency(spec.limit, _path(spec.key, f"{at}.key") if spec.key is not None else None)


def _path(text: str, field: str) -> tuple[str, ...]:
    try:
        return parse_path(text, field)
    except PredicateError as exc:
        raise ValidationError(exc.field, exc.message) from None


def _branch(
    workflow: str | None, version: int | None, input_path: str | None, at: str
) -> tuple[str, ...] | None:
    if workflow is None:
        raise ValidationError(f"{at}.workflow", "required field missing")
    if not is_name(workflow):
        raise ValidationError(f"{at}.workflow", _NAME_RULE)
    if version is not None and version < 1:
        raise ValidationError(f"{at}.version", "must be 1 or more")
    return _path(input_path, f"{at}.inputPath") if input_path is not None else None


def _child_step(s: StepSpec, at: str, common: dict[str, Any], target: Any) -> Step:
    """A run, map or parallel step: the child workflows it starts and how it waits for them."""
    if s.on_parent_close is not None and s.on_parent_close not in ON_PARENT_CLOSE:
        raise ValidationError(f"{at}.onParentClose", f"must be one of {list(ON_PARENT_CLOSE)}")
    fields: dict[str, Any] = {
        "on_failure": target(s.on_failure, f"{at}.onFailure"),
        "on_parent_close": s.on_parent_close or "cancel",
    }
    if s.type == "parallel":
        if s.branches is None:
            raise ValidationError(f"{at}.branches", "required field missing")
        if not MIN_BRANCHES <= len(s.branches) <= MAX_BRANCHES:
            raise ValidationError(f"{at}.branches", f"must hold {MIN_BRANCHES}..{MAX_BRANCHES} branches")
        branches = []
        for j, b in enumerate(s.branches):
            where = f"{at}.branches[{j}]"
            if not is_name(b.name):
                raise ValidationError(f"{where}.name", _NAME_RULE)
            if any(other.name == b.name for other in s.branches[:j]):
                raise ValidationError(f"{where}.name", f"duplicate branch name {b.name!r}")
            path = _branch(b.workflow, b.version, b.input_path, where)
            branches.append(Branch(b.name, b.workflow, b.version, path))
        return Step(**common, **fields, branches=tuple(branches))
    path = _branch(s.workflow, s.version, s.input_path if s.type == "run" else None, at)
    assert s.workflow is not None
    fields["branches"] = (Branch(s.name, s.workflow, s.version, path),)
    if s.type == "run":
        fields["timeout_ms"] = _duration(s.timeout, f"{at}.timeout")
        # A child run is retried only when the step says so (a task's default policy and the
        # workflow's `defaults.retry` are for handlers, not for whole child workflows).
        fields["retry"] = _retry(s.retry, None, at) if s.retry is not None else Retry(1, 0, 1.0, 0, None)
        return Step(**common, **fields)
    if s.items_path is None:
        raise ValidationError(f"{at}.itemsPath", "required field missing")
    fields["items_path"] = _path(s.items_path, f"{at}.itemsPath")
    if s.max_concurrency is not None:
        if not 1 <= s.max_concurrency <= MAX_CONCURRENCY:
            raise ValidationError(f"{at}.maxConcurrency", f"must be 1..{MAX_CONCURRENCY}")
        fields["max_concurrency"] = s.max_concurrency
    if s.tolerated_failures is not None and s.tolerated_failures < 0:
        raise ValidationError(f"{at}.toleratedFailures", "must be 0 or more")
    pct = s.tolerated_failure_percentage
    if pct is not None and not 0 <= pct <= 100:
        raise ValidationError(f"{at}.toleratedFailurePercentage", "must be 0..100")
    fields["tolerated_failures"] = s.tolerated_failures
    fields["tolerated_failure_percentage"] = pct
    return Step(**common, **fields)


def slot_workflow(key: str) -> str:
    """The workflow a run's slot key belongs to (`<workflow>/…` or `<workflow>#<step>/…`)."""
    return key.partition("/")[0].partition("#")[0]
