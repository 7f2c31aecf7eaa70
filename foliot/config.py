"""Settings from the environment, read once into one frozen object that is passed around."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

DEFAULT_DATABASE_URL = "sqlite:///./.foliot/foliot.db"


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from None


@attrs.frozen
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    database_url: str = DEFAULT_DATABASE_URL
    data_dir: str = "./.foliot"
    admin_token: str | None = None
    secret_key: str | None = None
    payload_max_bytes: int = 262_144
    sync_task_max_ms: int = 30_000
    max_live_actors: int = 100_000
    passivate_after_ms: int = 60_000
    mailbox_size: int = 64
    timer_window_ms: int = 60_000
    timer_max_inflight: int = 256
    log_level: str = "INFO"
    shutdown_grace_ms: int = 10_000

    @property
    def body_max_bytes(self) -> int:
        """Requests over this are refused from their Content-Length, before being read."""
        return 2 * self.payload_max_bytes + 64 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            host=e.get("FOLIOT_HOST", "127.0.0.1"),
            port=_int(e, "FOLIOT_PORT", 8080),
            database_url=e.get("FOLIOT_DATABASE_URL") or DEFAULT_DATABASE_URL,
            data_dir=e.get("FOLIOT_DATA_DIR", "./.foliot"),
            admin_token=e.get("FOLIOT_ADMIN_TOKEN") or None,
            secret_key=e.get("FOLIOT_SECRET_KEY") or None,
            payload_max_bytes=_int(e, "FOLIOT_PAYLOAD_MAX_BYTES", 262_144),
            sync_task_max_ms=_int(e, "FOLIOT_SYNC_TASK_MAX_MS", 30_000),
            max_live_actors=_int(e, "FOLIOT_MAX_LIVE_ACTORS", 100_000),
            passivate_after_ms=_int(e, "FOLIOT_PASSIVATE_AFTER_MS", 60_000),
            mailbox_size=_int(e, "FOLIOT_MAILBOX_SIZE", 64),
            timer_window_ms=_int(e, "FOLIOT_TIMER_WINDOW_MS", 60_000),
            timer_max_inflight=max(1, _int(e, "FOLIOT_TIMER_MAX_INFLIGHT", 256)),
            log_level=e.get("FOLIOT_LOG_LEVEL", "INFO"),
            shutdown_grace_ms=_int(e, "FOLIOT_SHUTDOWN_GRACE_MS", 10_000),
        )
