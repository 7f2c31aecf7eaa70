"""Prometheus metrics: one registry per engine, rendered by `prometheus_client`.

Counters and histograms are updated where things happen (a push ends, a commit returns, a
timer fires); everything else is read when `/metrics` is scraped, by `EngineCollector`.
Label values come from fixed vocabularies, or are names (apps, workflows, steps) held to a
cap (`LabelCap`, FOLIOT_METRICS_MAX_LABEL_VALUES): a tenant can neither forge a sample nor grow
the series without bound. The registry belongs to the engine, never to the process: tests run
several servers in one process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from ..core.workflow.machine import Accepted, Completed, Failed, Outcome
from ..core.workflow.model import STATUSES
from ..storage.base import Store, UnitOfWork, flatten
from . import gcwatch

if TYPE_CHECKING:
    from .observed import Observed

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Every value `foliot_push_outcomes_total{outcome}` can take.
OUTCOMES = (
    "ok",
    "accepted",
    "timeout",
    "connection_error",
    "http_3xx",
    "http_4xx",
    "http_5xx",
    "invalid_output",
    "output_too_large",
    "invalid_next",
    "app_error",
)
_OWN_CLASSES = frozenset(
    {"timeout", "connection_error", "invalid_output", "output_too_large", "invalid_next"}
)
_HTTP_CLASS = re.compile(r"http_([345])\d\d")

# Run events the console's per-app trends count, and the tally slot each one counts in:
# started, completed, failed (failed or timed out).
RUN_EVENTS: Final = {"run_started": 0, "run_completed": 1, "run_failed": 2, "run_timed_out": 2}


def tally_run_events(tally: dict[str, list[int]], unit: UnitOfWork) -> None:
    """Count a committed unit's run starts, completions and failures under its app."""
    for written in flatten([unit]) if unit.children else (unit,):  # child runs start with it
        for event in written.events:
            slot = RUN_EVENTS.get(event.type)
            if slot is not None:
                tally.setdefault(written.run.app, [0, 0, 0])[slot] += 1


# The label value a name past the cap is counted under: `_` begins no app, workflow or step
# name (names start with a letter or digit), so it never merges with a real one.
OTHER: Final = "_other"

# Run event -> the status label of `foliot_runs_closed_total` it counts under.
CLOSING_EVENTS: Final = {
    "run_completed": "completed",
    "run_failed": "failed",
    "run_timed_out": "timed_out",
    "run_cancelled": "cancelled",
}


class LabelCap:
    """Bounded label values for names: the first `limit` distinct apps, the first `limit`
    distinct (app, workflow) pairs and the first `limit` distinct (app, workflow, step)
    triples keep their names; a later one is counted with its last name as `OTHER` (and its
    prefix capped the same way). Each counter then holds at most about 2 * `limit` series per
    level, whatever tenants name, until the engine restarts."""

    __slots__ = ("_admitted", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self._admitted: dict[int, set[tuple[str, ...]]] = {}

    def labels(self, names: tuple[str, ...]) -> tuple[str, ...]:
        admitted = self._admitted.setdefault(len(names), set())
        if names in admitted:
            return names
        if len(names) > 1:
            prefix = self.labels(names[:-1])
            if prefix != names[:-1]:
                return (*prefix, OTHER)
        if len(admitted) < self.limit:
            admitted.add(names)
            return names
        return (*names[:-1], OTHER)


class RunCounters:
    """`foliot_runs_started_total`, `foliot_runs_closed_total` and
    `foliot_step_failures_total`, by app and workflow (capped), counted from committed units:
    what a run's events say happened, once it is durable."""

    __slots__ = ("_cap", "_children", "child_runs", "closed", "started", "step_failures")

    def __init__(self, registry: CollectorRegistry, max_label_values: int) -> None:
        self._cap = LabelCap(max_label_values)
        self.started = Counter(
            "foliot_runs_started",
            "Runs started, by app and workflow (names past FOLIOT_METRICS_MAX_LABEL_VALUES: _other).",
            ["app", "workflow"],
            registry=registry,
        )
        self.closed = Counter(
            "foliot_runs_closed",
            "Runs closed, by app, workflow and final status (completed, failed, timed_out, cancelled).",
            ["app", "workflow", "status"],
            registry=registry,
        )
        self.step_failures = Counter(
            "foliot_step_failures",
            "Steps failed for good (retries exhausted or not retryable), by app, workflow and step.",
            ["app", "workflow", "step"],
            registry=registry,
        )
        self.child_runs = Counter(
            "foliot_child_runs_started",
            "Child runs started by run, map and parallel steps, by the app and workflow of the run"
            " whose commit started them.",
            ["app", "workflow"],
            registry=registry,
        )
        # (metric, status, names) -> the child counter of names within the cap: `labels()`
        # takes a lock and builds a key each time, the hot path only looks up a dict. Names
        # past the cap are not kept (a tenant making up names must not grow this either).
        self._children: dict[tuple[str, str, tuple[str, ...]], Any] = {}

    @property
    def cap(self) -> LabelCap:
        """The label cap of these counters (shared by the queued-runs gauge)."""
        return self._cap

    def _child(self, which: str, names: tuple[str, ...], status: str = "") -> Any:
        key = (which, status, names)
        child = self._children.get(key)
        if child is None:
            labels = self._cap.labels(names)
            if which == "started":
                child = self.started.labels(*labels)
            elif which == "closed":
                child = self.closed.labels(*labels, status)
            elif which == "child":
                child = self.child_runs.labels(*labels)
            else:
                child = self.step_failures.labels(*labels)
            if labels == names:
                self._children[key] = child
        return child

    def count(self, unit: UnitOfWork) -> None:
        if unit.children:
            self._child("child", (unit.run.app, unit.run.workflow)).inc(len(unit.children))
            for child in unit.children:
                self.count(child)
        run = unit.run
        for event in unit.events:
            kind = event.type
            if kind == "run_started":
                self._child("started", (run.app, run.workflow)).inc()
            elif kind == "step_failed":
                self._child("step", (run.app, run.workflow, event.step or "")).inc()
            else:
                status = CLOSING_EVENTS.get(kind)
                if status is not None:
                    self._child("closed", (run.app, run.workflow), status).inc()


# Every value `foliot_schedule_fires_total{outcome}` can take.
SCHEDULE_OUTCOMES: Final = ("fired", "skipped", "missed")

# SWF: every label value is from the service model's enums (fixed vocabularies).
SWF_CLOSE_STATUSES: Final = ("COMPLETED", "FAILED", "CANCELED", "TERMINATED", "CONTINUED_AS_NEW", "TIMED_OUT")
SWF_DECISIONS: Final = (
    "ScheduleActivityTask",
    "RequestCancelActivityTask",
    "CompleteWorkflowExecution",
    "FailWorkflowExecution",
    "CancelWorkflowExecution",
    "ContinueAsNewWorkflowExecution",
    "RecordMarker",
    "StartTimer",
    "CancelTimer",
    "SignalExternalWorkflowExecution",
    "RequestCancelExternalWorkflowExecution",
    "StartChildWorkflowExecution",
    "ScheduleLambdaFunction",
)
# History event -> (counter, label) it counts under.
_SWF_EVENTS: Final = {
    "WorkflowExecutionStarted": ("started", ""),
    "DecisionTaskCompleted": ("decision_tasks", "completed"),
    "DecisionTaskStarted": ("decision_tasks", "started"),
    "DecisionTaskScheduled": ("decision_tasks", "scheduled"),
    "ActivityTaskScheduled": ("activity_tasks", "scheduled"),
    "ActivityTaskStarted": ("activity_tasks", "started"),
    "ActivityTaskCompleted": ("activity_tasks", "completed"),
    "ActivityTaskFailed": ("activity_tasks", "failed"),
    "ActivityTaskCanceled": ("activity_tasks", "canceled"),
    "ActivityTaskTimedOut": ("activity_tasks", "timed_out"),
    "LambdaFunctionCompleted": ("lambda_calls", "completed"),
    "LambdaFunctionFailed": ("lambda_calls", "failed"),
    "LambdaFunctionTimedOut": ("lambda_calls", "timed_out"),
    "StartLambdaFunctionFailed": ("lambda_calls", "not_started"),
}
_SWF_TIMEOUTS: Final = {
    "WorkflowExecutionTimedOut": "workflow",
    "DecisionTaskTimedOut": "decision",
    "ActivityTaskTimedOut": "activity",
    "LambdaFunctionTimedOut": "lambda",
}
SWF_TIMEOUT_TYPES: Final = ("START_TO_CLOSE", "SCHEDULE_TO_START", "SCHEDULE_TO_CLOSE", "HEARTBEAT")
_POLL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 65.0)

_PUSH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
_RATE_BUCKETS = (0.0, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class CommitTimer:
    """A store's `CommitObserver` (`Metrics.time_commits`): each commit's latency into its
    backend's histogram, the commits in progress, and a committed unit's run starts,
    completions and failures (`tally_run_events`)."""

    __slots__ = ("_counters", "_histogram", "_in_progress", "_tally")

    def __init__(
        self,
        histogram: Histogram,
        in_progress: Gauge,
        tally: dict[str, list[int]],
        counters: RunCounters | None = None,
    ) -> None:
        self._histogram = histogram
        self._in_progress = in_progress
        self._tally = tally
        self._counters = counters

    def commit_started(self) -> float:
        started = trio.current_time()
        self._in_progress.inc()
        return started

    def commit_ended(self, unit: UnitOfWork, started: float, committed: bool) -> None:
        self._in_progress.dec()
        self._histogram.observe(trio.current_time() - started)
        if committed and unit.events:
            tally_run_events(self._tally, unit)
            if self._counters is not None:
                self._counters.count(unit)


def outcome_label(outcome: Outcome) -> str:
    """Map a push outcome to the fixed vocabulary; any class a handler chose is `app_error`."""
    if isinstance(outcome, Completed):
        return "ok"
    if isinstance(outcome, Accepted):
        return "accepted"
    assert isinstance(outcome, Failed)
    if outcome.cls in _OWN_CLASSES:
        return outcome.cls
    matched = _HTTP_CLASS.fullmatch(outcome.cls)
    if matched is not None:
        return f"http_{matched.group(1)}xx"
    return "app_error"


def backend_label(store: object) -> str:
    """`sqlite` for `SqliteStore`, `postgres` for `PostgresStore` (a bounded set: the classes)."""
    return type(store).__name__.removesuffix("Store").lower() or "store"


class Metrics:
    """The engine's registry and the instruments updated at their source."""

    def __init__(self, max_label_values: int = 100) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = RunCounters(r, max_label_values)
        self._queued_cap = self.runs.cap  # the same names as the run counters
        self.pushes = Counter("foliot_tasks_pushed", "Push attempts sent to handlers.", registry=r)
        self.push_outcomes = Counter(
            "foliot_push_outcomes", "Push outcomes by class (a fixed vocabulary).", ["outcome"], registry=r
        )
        self.push_seconds = Histogram(
            "foliot_push_latency_seconds",
            "Time from sending a push to its outcome, by outcome.",
            ["outcome"],
            buckets=_PUSH_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "foliot_commit_latency_seconds",
            "Time to commit one unit of work, by storage backend.",
            ["backend"],
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.commits_in_progress = Gauge(
            "foliot_commits_in_progress", "Commits waiting for storage (queued or running).", registry=r
        )
        self.timer_lag = Histogram(
            "foliot_timer_lag_seconds",
            "How late each durable timer fired, after its due time.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.rate_delay = Histogram(
            "foliot_rate_limit_delay_seconds",
            "How long each rate-limited push or pull offer waited for its token (0: none).",
            buckets=_RATE_BUCKETS,
            registry=r,
        )
        for outcome in OUTCOMES:  # every series exists from the start, at 0
            self.push_outcomes.labels(outcome)
        self._swf_instruments(r)
        self.schedule_fires = Counter(
            "foliot_schedule_fires",
            "Schedule fires by outcome: fired (a run started), skipped (the overlap policy, or a"
            " refused start), missed (later than catchupWindow after an outage).",
            ["outcome"],
            registry=r,
        )
        for outcome in SCHEDULE_OUTCOMES:
            self.schedule_fires.labels(outcome)
        # app -> [started, completed, failed] since this engine started: the console's per-app
        # trends (not exported: app names are no fixed vocabulary).
        self.run_tally: dict[str, list[int]] = {}
        self._collector: EngineCollector | None = None

    def _swf_instruments(self, r: CollectorRegistry) -> None:
        self.swf_started = Counter(
            "foliot_swf_executions_started",
            "SWF executions started (children and continued runs too).",
            registry=r,
        )
        self.swf_closed = Counter(
            "foliot_swf_executions_closed", "SWF executions closed, by close status.", ["status"], registry=r
        )
        self.swf_decisions = Counter(
            "foliot_swf_decisions",
            "Decisions applied (RespondDecisionTaskCompleted), by type.",
            ["decision"],
            registry=r,
        )
        self.swf_decision_tasks = Counter(
            "foliot_swf_decision_tasks", "Decision task events, by event.", ["event"], registry=r
        )
        self.swf_activity_tasks = Counter(
            "foliot_swf_activity_tasks", "Activity task events, by event.", ["event"], registry=r
        )
        self.swf_lambda_calls = Counter(
            "foliot_swf_lambda_calls", "Lambda function outcomes, by outcome.", ["outcome"], registry=r
        )
        self.swf_timeouts = Counter(
            "foliot_swf_timeouts",
            "SWF timeouts fired, by what timed out and the timeout type.",
            ["kind", "type"],
            registry=r,
        )
        self.swf_poll_wait = Histogram(
            "foliot_swf_poll_wait_seconds",
            "How long a PollFor*Task waited, by task kind and whether it got a task.",
            ["kind", "result"],
            buckets=_POLL_BUCKETS,
            registry=r,
        )
        self._swf_counters = {
            "decision_tasks": self.swf_decision_tasks,
            "activity_tasks": self.swf_activity_tasks,
            "lambda_calls": self.swf_lambda_calls,
        }
        for status in SWF_CLOSE_STATUSES:
            self.swf_closed.labels(status)
        for decision in SWF_DECISIONS:
            self.swf_decisions.labels(decision)

    def schedule_counted(self, outcome: str, n: int = 1) -> None:
        """Schedule fires made (`fired`), skipped or missed (`ScheduleMeter`)."""
        if outcome in SCHEDULE_OUTCOMES:
            self.schedule_fires.labels(outcome).inc(n)

    def swf_polled(self, kind: str, result: str, seconds: float) -> None:
        """One SWF long poll ended: with a task (`task`) or none (`empty`)."""
        self.swf_poll_wait.labels(kind, result).observe(seconds)

    def swf_committed(self, events: Iterable[Any], decisions: Iterable[str] = ()) -> None:
        """Count what one committed SWF transition recorded (its history events), and the
        decisions of a decision batch (types outside the enum were refused before)."""
        for event in events:
            kind = event.event_type
            counted = _SWF_EVENTS.get(kind)
            if counted is not None:
                name, label = counted
                if name == "started":
                    self.swf_started.inc()
                else:
                    self._swf_counters[name].labels(label).inc()
            timed_out = _SWF_TIMEOUTS.get(kind)
            if timed_out is not None:
                timeout_type = event.attributes.get("timeoutType", "START_TO_CLOSE")
                if timeout_type in SWF_TIMEOUT_TYPES:
                    self.swf_timeouts.labels(timed_out, timeout_type).inc()
            if kind.startswith("WorkflowExecution"):
                status = _CLOSING.get(kind)
                if status is not None:
                    self.swf_closed.labels(status).inc()
        for decision in decisions:
            if decision in SWF_DECISIONS:
                self.swf_decisions.labels(decision).inc()

    def attach(self, engine: Observed) -> None:
        """Read the engine's live values (actors, timers, queues, storage) at each scrape."""
        self._collector = EngineCollector(engine)
        self.registry.register(self._collector)

    def queued_labels(self, queued: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int]:
        """Queued runs per (app, workflow) with the label cap of the run counters applied (a
        workflow past it is summed into `_other`)."""
        out: dict[tuple[str, str], int] = {}
        for names in sorted(queued):
            app, workflow = self._queued_cap.labels(names)
            out[(app, workflow)] = out.get((app, workflow), 0) + queued[names]
        return out

    def rate_delayed(self, seconds: float) -> None:
        """A rate-limited send's wait for its token (0 when it could go at once)."""
        self.rate_delay.observe(seconds)

    def pushed(self) -> None:
        self.pushes.inc()

    def push_done(self, outcome: Outcome, seconds: float) -> str:
        """Count a push's outcome and observe its latency; returns the outcome's label."""
        label = outcome_label(outcome)
        self.push_outcomes.labels(label).inc()
        self.push_seconds.labels(label).observe(seconds)
        return label

    def outcome_counts(self) -> dict[str, int]:
        """Push outcomes counted so far, by label (the ones seen at least once)."""
        counts = {}
        for outcome in OUTCOMES:
            value = self.registry.get_sample_value("foliot_push_outcomes_total", {"outcome": outcome})
            if value:
                counts[outcome] = int(value)
        return counts

    def time_commits(self, store: Store) -> None:
        """Observe every commit of `store`, whoever calls it (actors, starts, the supervisor),
        through the store's own hook; it holds one observer, so a restarted engine on the same
        store does not observe every commit twice."""
        histogram = self.commit_seconds.labels(backend_label(store))
        store.observe_commits(CommitTimer(histogram, self.commits_in_progress, self.run_tally, self.runs))

    def exposition(
        self,
        open_runs: Mapping[str, int],
        swf: Mapping[str, int] | None = None,
        queued: Mapping[tuple[str, str], int] | None = None,
    ) -> bytes:
        """The text exposition; `open_runs` (and `swf`: open and parked executions; `queued`:
        queued runs per app and workflow) were read from the store just before (an async read)."""
        if self._collector is not None:
            self._collector.open_runs = dict(open_runs)
            self._collector.swf = dict(swf or {})
            self._collector.queued = self.queued_labels(queued or {})
        return generate_latest(self.registry)


class EngineCollector:
    """Values read at scrape time: nothing to keep in step, nothing to forget to update."""

    def __init__(self, engine: Observed) -> None:
        self.engine = engine
        self.open_runs: dict[str, int] = {}
        self.swf: dict[str, int] = {}
        self.queued: dict[tuple[str, str], int] = {}

    def collect(self) -> Iterable[Metric]:
        eng = self.engine
        sup = eng.supervisor
        actors = list(sup.actors.values())
        timers = eng.timers.stats()
        yield _gauge(
            "foliot_live_actors", "Actors (runs and SWF executions) currently in memory.", len(actors)
        )
        yield _counter("foliot_actor_spawns", "Actors spawned or rehydrated.", sup.spawned)
        yield _counter(
            "foliot_actor_exits", "Actors that left memory (passivated, closed or stopped).", sup.passivated
        )
        yield _counter("foliot_actor_restarts", "Actor crashes restarted from a checkpoint.", sup.restarts)
        depths = [a.mailbox_depth for a in actors]
        yield _gauge("foliot_mailbox_messages", "Messages waiting in all actor mailboxes.", sum(depths))
        yield _gauge("foliot_mailbox_max_depth", "The fullest actor mailbox.", max(depths, default=0))
        runs = GaugeMetricFamily("foliot_open_runs", "Open runs by status.", labels=["status"])
        for status in STATUSES:
            if status in self.open_runs:
                runs.add_metric([status], self.open_runs[status])
        yield runs
        queued = GaugeMetricFamily(
            "foliot_queued_runs",
            "Runs waiting for a concurrency slot, by app and workflow (names past"
            " FOLIOT_METRICS_MAX_LABEL_VALUES: _other).",
            labels=["app", "workflow"],
        )
        for (app, workflow), n in sorted(self.queued.items()):
            queued.add_metric([app, workflow], n)
        yield queued
        yield _gauge(
            "foliot_timers_in_memory", "Durable timers held in the wheel's window.", timers["inMemory"]
        )
        yield _counter("foliot_timers_fired", "Durable timers fired.", timers["fired"])
        yield _gauge(
            "foliot_timer_firings_in_flight",
            "Timer firings handed to actors and not yet committed (at most FOLIOT_TIMER_MAX_INFLIGHT).",
            timers["inflight"],
        )
        yield _counter(
            "foliot_timer_retries", "Timer firings handed out again (not applied in time).", timers["retried"]
        )
        yield _gauge("foliot_pushes_in_flight", "Pushes sent and not yet answered.", eng.dispatcher.inflight)
        yield _gauge("foliot_pollers_waiting", "Long-polling workers parked.", eng.queues.waiting_pollers())
        yield _gauge(
            "foliot_queued_tasks", "Tasks offered to pull queues, not yet claimed.", eng.queues.total()
        )
        pruner = eng.pruner
        yield _counter(
            "foliot_pruned_runs",
            "Closed runs deleted, with their history, after the retention.",
            pruner.pruned_runs,
        )
        yield _counter(
            "foliot_pruned_idempotency",
            "Idempotency records deleted after their TTL.",
            pruner.pruned_idempotency,
        )
        yield _counter(
            "foliot_pruned_swf_executions",
            "Closed SWF executions deleted, with their history, after their domain's retention.",
            pruner.pruned_swf_executions,
        )
        yield _counter(
            "foliot_pruned_rate_buckets",
            "Rate-limit buckets deleted once idle (full again) for a minute past their last slot.",
            pruner.pruned_rate_buckets,
        )
        yield _counter(
            "foliot_pruned_debounce_keys",
            "Leading debounce keys deleted once their burst was over and their run closed.",
            pruner.pruned_debounce_keys,
        )
        yield _counter(
            "foliot_pruned_schedule_fires",
            "Schedule fire records deleted by the sweep because their run was gone.",
            pruner.pruned_schedule_fires,
        )
        yield _counter(
            "foliot_prune_failures",
            "Pruning passes that failed (retried at the next interval).",
            pruner.failures,
        )
        yield _gauge(
            "foliot_prune_last_run_timestamp_seconds",
            "When the last pruning pass finished (0: none yet).",
            (pruner.last_run_at or 0) / 1000,
        )
        adm = eng.admission
        yield _gauge("foliot_push_backlog", "Pushes waiting for a sender.", eng.dispatcher.backlog)
        yield _gauge(
            "foliot_rate_limited_pushes",
            "Pushes and pull offers waiting for a rate-limit token's slot.",
            eng.dispatcher.delayed,
        )
        yield _gauge("foliot_requests_in_flight", "Starts and signals being served now.", adm.inflight)
        yield _gauge(
            "foliot_storage_queue", "Units of work waiting for the storage writer(s).", adm.storage_queue
        )
        gate = adm.gate
        yield _gauge(
            "foliot_admission_shedding",
            "1 while the latency gate sheds starts and signals (a standing queue was seen).",
            int(gate.shedding),
        )
        yield _gauge(
            "foliot_admission_limit",
            "Starts and signals served at once while shedding (FOLIOT_MAX_INFLIGHT_REQUESTS otherwise).",
            gate.limit if gate.limit is not None else adm.max_inflight,
        )
        yield _gauge(
            "foliot_admission_min_latency_seconds",
            "Fastest start or signal answered in the gate's last finished interval (0: none).",
            gate.last_min_s or 0.0,
        )
        yield _gauge(
            "foliot_admission_throughput",
            "Starts and signals answered per second over the gate's window.",
            gate.throughput,
        )
        yield _gauge(
            "foliot_event_loop_lag_seconds",
            "How late the event loop woke a sleeper, at most, in the gate's last finished interval"
            " (measured while starts or signals arrive).",
            gate.last_lag_s,
        )
        yield _gauge(
            "foliot_admission_lag_scale",
            "Share of the gate's limit kept while the event loop runs late (1: not reduced).",
            gate.scale,
        )
        yield _counter(
            "foliot_admission_behind_own_run",
            "Signals answered after waiting behind their own run's messages (not timed by the gate).",
            adm.behind_own_run,
        )
        refused = CounterMetricFamily(
            "foliot_admission_refused",
            "Starts and signals refused as overloaded (429/503 with Retry-After), by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(adm.refused.items()):
            refused.add_metric([reason], count)
        yield refused
        yield from _writer(eng.store)
        yield from _gc(gcwatch.watch())
        if "open" in self.swf:
            yield _gauge(
                "foliot_swf_open_executions", "Open SWF executions, read from storage.", self.swf["open"]
            )
        if "parked" in self.swf:
            yield _gauge(
                "foliot_swf_parked_executions",
                "SWF executions parked after their actor crashed too often (GET /admin/swf/parked).",
                self.swf["parked"],
            )
        swf_actors = sum(1 for a in actors if a.kind.name == "swf")
        yield _gauge("foliot_swf_live_actors", "SWF execution actors currently in memory.", swf_actors)


_CLOSING: Final = {
    "WorkflowExecutionCompleted": "COMPLETED",
    "WorkflowExecutionFailed": "FAILED",
    "WorkflowExecutionCanceled": "CANCELED",
    "WorkflowExecutionTerminated": "TERMINATED",
    "WorkflowExecutionContinuedAsNew": "CONTINUED_AS_NEW",
    "WorkflowExecutionTimedOut": "TIMED_OUT",
}


def _writer(store: Any) -> Iterable[Metric]:
    # The SQLite store funnels every write through one bounded queue to its writer thread: a
    # long queue and blocked callers are where storage back-pressure shows first.
    queued = getattr(store, "writer_queue", None)
    blocked = getattr(store, "writer_blocked", None)
    if not isinstance(queued, int) or not isinstance(blocked, int):
        return
    yield _gauge("foliot_storage_writer_queue", "Writes queued for the SQLite writer.", queued)
    yield _gauge(
        "foliot_storage_writer_blocked", "Callers blocked because the writer queue is full.", blocked
    )
    checkpoints = getattr(store, "wal_checkpoints", None)
    if isinstance(checkpoints, int):
        yield _counter(
            "foliot_storage_wal_checkpoints",
            "SQLite log checkpoints run by the checkpoint thread.",
            checkpoints,
        )


def _gc(watch: gcwatch.GcWatch) -> Iterable[Metric]:
    # Process-wide: every engine of a process reports the same collector.
    count = CounterMetricFamily(
        "foliot_gc_collections", "Cyclic garbage collections by generation.", labels=["generation"]
    )
    total = CounterMetricFamily(
        "foliot_gc_pause_seconds", "Time the process stood still collecting.", labels=["generation"]
    )
    longest = GaugeMetricFamily(
        "foliot_gc_pause_max_seconds", "The longest collection since start.", labels=["generation"]
    )
    for generation in gcwatch.GENERATIONS:
        label = [str(generation)]
        count.add_metric(label, watch.collections[generation])
        total.add_metric(label, watch.pause_s[generation])
        longest.add_metric(label, watch.max_pause_s[generation])
    yield from (count, total, longest)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
