"""Settings from the environment, read once into one frozen object that is passed around."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import attrs

from .networks import Network, parse_networks
from .workflow.duration import DurationError, format_duration, parse_duration

DEFAULT_DATA_DIR = "./.foliot"
DEFAULT_DATABASE_URL = "sqlite:///./.foliot/foliot.db"
NEVER = "never"  # a duration setting that disables expiry


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from None


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number (`10`, `0.5`)."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise SystemExit(f"{name} must be a number above 0, got {raw!r}")
    return value


def _lifetime(env: Mapping[str, str], name: str, default: int) -> int | None:
    """A positive duration string (`30d`, `24h`) in ms, or None for `never`."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw == NEVER:
        return None
    try:
        value = parse_duration(raw)
    except DurationError as exc:
        raise SystemExit(f"{name} must be a duration such as 30d or 24h, or {NEVER!r}: {exc}") from None
    if value <= 0:
        raise SystemExit(f"{name} must be longer than 0 (use {NEVER!r} to keep forever)")
    return value


def swf_credentials(raw: str | None) -> tuple[tuple[str, str], ...]:
    """FOLIOT_SWF_CREDENTIALS `id:secret[,id:secret]` as pairs; a secret may hold `:` (split at
    the first), not `,`."""
    if raw is None or not raw.strip():
        return ()
    pairs = []
    for number, item in enumerate(raw.split(","), start=1):
        key_id, sep, secret = item.strip().partition(":")
        if not sep or not key_id or not secret:
            raise SystemExit(f"FOLIOT_SWF_CREDENTIALS entry {number} is not id:secret")
        pairs.append((key_id, secret))
    return tuple(pairs)


def describe_lifetime(ms: int | None) -> str:
    """A lifetime setting as it would be written: `30d`, `24h` or `never`."""
    return NEVER if ms is None else format_duration(ms)


def database_url_in(data_dir: str) -> str:
    """The default database: `foliot.db` in the data directory."""
    return f"sqlite:///{data_dir.rstrip('/')}/foliot.db"  # an absolute dir gives sqlite:////abs/...


def redact_url(url: str) -> str:
    """A database URL fit for a log line: any password replaced by `***`."""
    if url.startswith("sqlite:"):
        return url
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port is not None else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "<unparsable database URL>"


@attrs.frozen
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: str = DEFAULT_DATA_DIR
    database_url: str = attrs.field(
        default=attrs.Factory(lambda self: database_url_in(self.data_dir), takes_self=True)
    )
    admin_token: str | None = None
    secret_key: str | None = None
    payload_max_bytes: int = 262_144
    sync_task_max_ms: int = 30_000
    # Runs one unit of work may create: a run, map or parallel step's children and theirs
    # (`too_many_runs` past it; kinds/run/children.py).
    max_tree_runs: int = 10_000
    # Open runs one app may have (issue 37); a start past it is refused (`quota_exceeded`, 429).
    app_max_open_runs: int = 1_000_000
    max_live_actors: int = 100_000
    passivate_after_ms: int = 60_000
    mailbox_size: int = 64
    timer_window_ms: int = 60_000
    timer_max_inflight: int = 256
    push_concurrency: int = 64  # senders, and the httpx pool's connection limit
    push_concurrency_per_app: int = 48  # so one app's burst leaves senders for the others
    push_backlog_max: int = 10_000  # queued pushes past which new starts and signals get 429
    max_inflight_requests: int = 512  # starts + signals being served at once; more get 429
    storage_queue_max: int = 2_000  # units of work waiting for the writer; more: 503
    # SQLite: less free space than this on the database's file system: /readyz says not ready
    min_free_bytes: int = 64 * 1024 * 1024
    mailbox_wait_ms: int = 1_000  # how long a request waits for room in one run's mailbox
    # Latency gate: past this queueing delay for a whole interval, starts and signals are shed.
    admission_target_ms: int = 100  # 0 turns the gate off
    admission_interval_ms: int = 200
    # Event-loop lag past which the gate sheds too (the process reads its sockets that late);
    # 0: measured and shown in /metrics only.
    admission_lag_ms: int = 0
    # Work an app's definitions make without a caller (schedule fires): per app, runs started
    # per second (a bucket of `burst`); more is put off to its turn (actors/lanes.py).
    app_internal_rate: int = 20
    app_internal_burst: int = 40
    # Child runs an app's fan-outs may start per second (a bucket of `burst`); the rest start
    # when the lane has room (a `top_up` timer on the parent; core/workflow/machine.py).
    app_child_rate: int = 200
    app_child_burst: int = 2_000
    # Connection bounds (foliot/http/listen.py): open connections in all (0: the descriptor
    # limit less a reserve) and per peer address (0: none), requests under way per peer
    # address (foliot/http/edge.py; 0: none), and the time a request head may take to arrive.
    max_connections: int = 0
    peer_max_connections: int = 1_024
    peer_max_requests: int = 256
    head_timeout_ms: int = 10_000
    # After start-up, one full collection, then what survived is frozen out of the cyclic
    # collector's walks (foliot/gcwatch.py); `foliot serve` only.
    gc_freeze: bool = True
    # The interpreter's thread switch interval while serving (CPython's default is 5 ms): how
    # long a thread that gave up the GIL for I/O (the SQLite writer after each statement,
    # asyncpg's loop thread) may wait to get it back while the event loop runs.
    switch_interval_us: int = 100
    log_level: str = "INFO"
    shutdown_grace_ms: int = 10_000
    # Signals a run holds while it does not wait for them: they live in its document, which is
    # rewritten on every transition, so they are bounded.
    signal_buffer_max: int = 100
    signal_buffer_max_bytes: int = 1_048_576
    # Retention (None: kept forever). Idempotency records count from their creation, closed
    # runs (with their events, tasks, timers and signal ids) from `closedAt`.
    idempotency_ttl_ms: int | None = 86_400_000
    retention_ms: int | None = 30 * 86_400_000
    prune_interval_ms: int = 300_000
    # Per-app bounds of schedules (issue 37), checked when one is created or replaced: how many
    # an app may define, and the fires per second all of them may make together
    # (`Schedule.fire_rate`: `every: 1s` is 1/s, a cron 1 / its shortest interval).
    schedules_per_app: int = 1_000
    schedule_fire_rate_per_app: float = 10.0
    # The console's trends (foliot/console/trends.py): one sample every interval (0: none), this
    # many kept.
    trend_interval_ms: int = 10_000
    trend_samples: int = 360
    # Dry-runs (foliot/http/deploys.py): recorded events replayed per request (past it the
    # answer is partial, with a cursor), and dry-runs of one app under way at once (429 past it).
    dryrun_max_events: int = 200_000
    dryrun_concurrency: int = 2
    # AWS SWF access keys preset from the environment (id, secret); never stored.
    swf_credentials: tuple[tuple[str, str], ...] = attrs.field(default=(), repr=False)
    # Several nodes on one PostgreSQL: this node's id (None: generated per process) and the
    # address other nodes reach it at (None: http://127.0.0.1:<port>).
    node_id: str | None = None
    advertise_url: str | None = None
    # How long a partition's lease lasts without renewal (renewed every fifth of it); a dead
    # node's partitions are taken over within this plus a tick.
    lease_ttl_ms: int = 10_000
    # Reverse proxies whose Forwarded / X-Forwarded-* headers are believed (foliot/http/proxy.py),
    # and the public address (its scheme makes the console's cookies Secure).
    trusted_proxies: tuple[Network, ...] = ()
    public_url: str | None = None
    # Console sessions (foliot/console/session.py): ended after this long without a request,
    # and this long after sign-in at the latest.
    console_idle_ms: int = 30 * 60_000
    console_session_ms: int = 12 * 3_600_000
    # Metrics labelled by name (app, workflow, step): distinct values kept per label before
    # further ones are counted as `_other` (foliot/observe/metrics.py LabelCap).
    metrics_max_label_values: int = 100
    # Tracing (foliot/observe/tracing.py): `otlp` exports spans to an OTLP/HTTP collector at
    # `otel_endpoint` as `otel_service_name`; `off` (the default) imports no OpenTelemetry.
    tracing: str = "off"
    otel_endpoint: str = "http://localhost:4318/v1/traces"
    otel_service_name: str = "foliot"

    @property
    def advertised(self) -> str:
        return self.advertise_url or f"http://127.0.0.1:{self.port}"

    @property
    def body_max_bytes(self) -> int:
        """Requests over this are refused from their Content-Length, before being read."""
        return 2 * self.payload_max_bytes + 64 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        data_dir = e.get("FOLIOT_DATA_DIR") or DEFAULT_DATA_DIR
        payload_max = _int(e, "FOLIOT_PAYLOAD_MAX_BYTES", 262_144)
        buffer_bytes = _int(e, "FOLIOT_SIGNAL_BUFFER_MAX_BYTES", 1_048_576)
        if buffer_bytes < payload_max:
            raise SystemExit(
                "FOLIOT_SIGNAL_BUFFER_MAX_BYTES must be at least FOLIOT_PAYLOAD_MAX_BYTES"
                f" ({buffer_bytes} < {payload_max}), or a signal of the allowed size could never wait"
            )
        buffer_max = _int(e, "FOLIOT_SIGNAL_BUFFER_MAX", 100)
        if buffer_max < 1:
            raise SystemExit("FOLIOT_SIGNAL_BUFFER_MAX must be at least 1")
        interval = _lifetime(e, "FOLIOT_PRUNE_INTERVAL", 300_000)
        if interval is None:
            raise SystemExit(
                f"FOLIOT_PRUNE_INTERVAL must be a duration; to keep data set {NEVER!r} lifetimes"
            )
        return cls(
            host=e.get("FOLIOT_HOST", "127.0.0.1"),
            port=_int(e, "FOLIOT_PORT", 8080),
            data_dir=data_dir,
            database_url=e.get("FOLIOT_DATABASE_URL") or database_url_in(data_dir),
            admin_token=e.get("FOLIOT_ADMIN_TOKEN") or None,
            secret_key=e.get("FOLIOT_SECRET_KEY") or None,
            payload_max_bytes=payload_max,
            sync_task_max_ms=_int(e, "FOLIOT_SYNC_TASK_MAX_MS", 30_000),
            max_tree_runs=max(1, _int(e, "FOLIOT_MAX_TREE_RUNS", 10_000)),
            app_max_open_runs=max(1, _int(e, "FOLIOT_APP_MAX_OPEN_RUNS", 1_000_000)),
            max_live_actors=_int(e, "FOLIOT_MAX_LIVE_ACTORS", 100_000),
            passivate_after_ms=_int(e, "FOLIOT_PASSIVATE_AFTER_MS", 60_000),
            mailbox_size=_int(e, "FOLIOT_MAILBOX_SIZE", 64),
            timer_window_ms=_int(e, "FOLIOT_TIMER_WINDOW_MS", 60_000),
            timer_max_inflight=max(1, _int(e, "FOLIOT_TIMER_MAX_INFLIGHT", 256)),
            push_concurrency=max(1, _int(e, "FOLIOT_PUSH_CONCURRENCY", 64)),
            push_concurrency_per_app=max(1, _int(e, "FOLIOT_PUSH_CONCURRENCY_PER_APP", 48)),
            push_backlog_max=_int(e, "FOLIOT_PUSH_BACKLOG_MAX", 10_000),
            max_inflight_requests=_int(e, "FOLIOT_MAX_INFLIGHT_REQUESTS", 512),
            storage_queue_max=_int(e, "FOLIOT_STORAGE_QUEUE_MAX", 2_000),
            min_free_bytes=max(0, _int(e, "FOLIOT_MIN_FREE_BYTES", 64 * 1024 * 1024)),
            mailbox_wait_ms=_int(e, "FOLIOT_MAILBOX_WAIT_MS", 1_000),
            admission_target_ms=max(0, _int(e, "FOLIOT_ADMISSION_TARGET_MS", 100)),
            admission_interval_ms=max(1, _int(e, "FOLIOT_ADMISSION_INTERVAL_MS", 200)),
            admission_lag_ms=max(0, _int(e, "FOLIOT_ADMISSION_LAG_MS", 0)),
            schedules_per_app=max(1, _int(e, "FOLIOT_SCHEDULES_PER_APP", 1_000)),
            schedule_fire_rate_per_app=_positive(e, "FOLIOT_SCHEDULE_FIRE_RATE_PER_APP", 10.0),
            app_internal_rate=max(1, _int(e, "FOLIOT_APP_INTERNAL_RATE", 20)),
            app_internal_burst=max(1, _int(e, "FOLIOT_APP_INTERNAL_BURST", 40)),
            app_child_rate=max(1, _int(e, "FOLIOT_APP_CHILD_RATE", 200)),
            app_child_burst=max(1, _int(e, "FOLIOT_APP_CHILD_BURST", 2_000)),
            max_connections=max(0, _int(e, "FOLIOT_MAX_CONNECTIONS", 0)),
            peer_max_connections=max(0, _int(e, "FOLIOT_PEER_MAX_CONNECTIONS", 1_024)),
            peer_max_requests=max(0, _int(e, "FOLIOT_PEER_MAX_REQUESTS", 256)),
            head_timeout_ms=max(100, _int(e, "FOLIOT_HEAD_TIMEOUT_MS", 10_000)),
            gc_freeze=_int(e, "FOLIOT_GC_FREEZE", 1) != 0,
            switch_interval_us=min(5_000, max(50, _int(e, "FOLIOT_SWITCH_INTERVAL_US", 100))),
            log_level=e.get("FOLIOT_LOG_LEVEL", "INFO"),
            shutdown_grace_ms=_int(e, "FOLIOT_SHUTDOWN_GRACE_MS", 10_000),
            signal_buffer_max=buffer_max,
            signal_buffer_max_bytes=buffer_bytes,
            idempotency_ttl_ms=_lifetime(e, "FOLIOT_IDEMPOTENCY_TTL", 86_400_000),
            retention_ms=_lifetime(e, "FOLIOT_RETENTION", 30 * 86_400_000),
            prune_interval_ms=interval,
            trend_interval_ms=_trend_interval(_int(e, "FOLIOT_TREND_INTERVAL_MS", 10_000)),
            trend_samples=min(100_000, max(2, _int(e, "FOLIOT_TREND_SAMPLES", 360))),
            dryrun_max_events=max(1, _int(e, "FOLIOT_DRYRUN_MAX_EVENTS", 200_000)),
            dryrun_concurrency=max(1, _int(e, "FOLIOT_DRYRUN_CONCURRENCY", 2)),
            swf_credentials=swf_credentials(e.get("FOLIOT_SWF_CREDENTIALS")),
            node_id=_node_id(e.get("FOLIOT_NODE_ID")),
            advertise_url=_advertise_url(e.get("FOLIOT_ADVERTISE_URL")),
            lease_ttl_ms=min(600_000, max(3_000, _int(e, "FOLIOT_LEASE_TTL_MS", 10_000))),
            trusted_proxies=_trusted_proxies(e.get("FOLIOT_TRUSTED_PROXIES")),
            public_url=_public_url(e.get("FOLIOT_PUBLIC_URL")),
            console_idle_ms=_console(e, "FOLIOT_CONSOLE_IDLE", 30 * 60_000),
            console_session_ms=_console(e, "FOLIOT_CONSOLE_SESSION_MAX", 12 * 3_600_000),
            metrics_max_label_values=min(100_000, max(0, _int(e, "FOLIOT_METRICS_MAX_LABEL_VALUES", 100))),
            tracing=_tracing(e.get("FOLIOT_TRACING")),
            otel_endpoint=_otel_endpoint(e.get("FOLIOT_OTEL_ENDPOINT")),
            otel_service_name=e.get("FOLIOT_OTEL_SERVICE_NAME") or "foliot",
        )


NODE_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,48}")


def _node_id(raw: str | None) -> str | None:
    """FOLIOT_NODE_ID: 1 to 48 letters, digits, `.`, `_`, `-` (it names the node's PostgreSQL
    sessions, `application_name = foliot-<node id>`, which PostgreSQL cuts at 63 bytes)."""
    if not raw:
        return None
    if not NODE_ID_RE.fullmatch(raw):
        raise SystemExit(f"FOLIOT_NODE_ID must be 1-48 letters, digits, '.', '_' or '-', got {raw!r}")
    return raw


def _advertise_url(raw: str | None) -> str | None:
    """FOLIOT_ADVERTISE_URL: how other nodes reach this one (an http(s) base URL)."""
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit(f"FOLIOT_ADVERTISE_URL must be an http(s) URL (http://10.0.0.5:8080), got {raw!r}")
    return raw.rstrip("/")


def _console(env: Mapping[str, str], name: str, default: int) -> int:
    """A console session lifetime: a duration from one minute to 30 days (not `never`)."""
    value = _lifetime(env, name, default)
    if value is None or not 60_000 <= value <= 30 * 86_400_000:
        raise SystemExit(f"{name} must be a duration from 1m to 30d, such as 30m or 12h")
    return value


def _trusted_proxies(raw: str | None) -> tuple[Network, ...]:
    try:
        return parse_networks(raw)
    except ValueError as exc:
        raise SystemExit(f"FOLIOT_TRUSTED_PROXIES: {exc}") from None


def _public_url(raw: str | None) -> str | None:
    """FOLIOT_PUBLIC_URL: where the public reaches this server (`https://foliot.example.com`)."""
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit(
            f"FOLIOT_PUBLIC_URL must be an http(s) URL (https://foliot.example.com), got {raw!r}"
        )
    return raw.rstrip("/")


def _trend_interval(ms: int) -> int:
    """0 turns the console's trend sampling off; otherwise at least one second."""
    return 0 if ms <= 0 else max(1_000, ms)


def _tracing(raw: str | None) -> str:
    """FOLIOT_TRACING: `off` (the default) or `otlp` (needs the `otel` extra)."""
    value = (raw or "off").strip().lower()
    if value not in ("off", "otlp"):
        raise SystemExit(f"FOLIOT_TRACING must be 'off' or 'otlp', got {raw!r}")
    return value


def _otel_endpoint(raw: str | None) -> str:
    """FOLIOT_OTEL_ENDPOINT: the collector's OTLP/HTTP traces URL; a bare base URL
    (`http://collector:4318`) gets the standard `/v1/traces` path."""
    if not raw:
        return "http://localhost:4318/v1/traces"
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit(f"FOLIOT_OTEL_ENDPOINT must be an http(s) URL (http://collector:4318), got {raw!r}")
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path="/v1/traces"))
    return raw
