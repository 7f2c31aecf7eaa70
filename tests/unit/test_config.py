"""Settings read from the environment: defaults, the data directory, lifetimes, signal bounds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from foliot.core.config import DEFAULT_DATABASE_URL, Settings, describe_lifetime, redact_url
from foliot.core.limits import LIMITS
from foliot.server import serve
from foliot.storage.factory import sqlite_path

from ..conftest import make_settings


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.data_dir == "./.foliot"
    assert s.database_url == DEFAULT_DATABASE_URL == "sqlite:///./.foliot/foliot.db"  # SPEC §8
    assert (s.signal_buffer_max, s.signal_buffer_max_bytes) == (100, 1_048_576)
    assert s.idempotency_ttl_ms == 86_400_000
    assert s.retention_ms == 30 * 86_400_000
    assert s.prune_interval_ms == 300_000
    assert Settings() == s  # the constructor's defaults are the environment's


@pytest.mark.parametrize(
    ("data_dir", "path"),
    [
        ("/var/lib/foliot", "/var/lib/foliot/foliot.db"),
        ("/var/lib/foliot/", "/var/lib/foliot/foliot.db"),
        ("data", "data/foliot.db"),
        ("./state", "./state/foliot.db"),
    ],
)
def test_the_data_dir_places_the_database(data_dir: str, path: str) -> None:
    s = Settings.from_env({"FOLIOT_DATA_DIR": data_dir})
    assert s.data_dir == data_dir
    assert sqlite_path(s.database_url) == path
    assert sqlite_path(Settings(data_dir=data_dir).database_url) == path


def test_an_explicit_database_url_wins_over_the_data_dir() -> None:
    s = Settings.from_env({"FOLIOT_DATA_DIR": "/d", "FOLIOT_DATABASE_URL": "postgresql://u@h/db"})
    assert (s.data_dir, s.database_url) == ("/d", "postgresql://u@h/db")
    assert Settings.from_env({"FOLIOT_DATA_DIR": "/d", "FOLIOT_DATABASE_URL": ""}).database_url == (
        "sqlite:////d/foliot.db"
    )


def test_lifetimes_are_durations_or_never() -> None:
    s = Settings.from_env({"FOLIOT_RETENTION": "7d", "FOLIOT_IDEMPOTENCY_TTL": "1h30m"})
    assert (s.retention_ms, s.idempotency_ttl_ms) == (7 * 86_400_000, 5_400_000)
    s = Settings.from_env({"FOLIOT_RETENTION": "never", "FOLIOT_IDEMPOTENCY_TTL": "never"})
    assert s.retention_ms is None and s.idempotency_ttl_ms is None
    assert Settings.from_env({"FOLIOT_PRUNE_INTERVAL": "30s"}).prune_interval_ms == 30_000
    assert [describe_lifetime(ms) for ms in (None, 86_400_000, 30 * 86_400_000)] == ["never", "1d", "30d"]


@pytest.mark.parametrize(
    "env",
    [
        {"FOLIOT_RETENTION": "30"},
        {"FOLIOT_RETENTION": "0s"},
        {"FOLIOT_IDEMPOTENCY_TTL": "1.5h"},
        {"FOLIOT_PRUNE_INTERVAL": "never"},
        {"FOLIOT_SIGNAL_BUFFER_MAX": "0"},
        {"FOLIOT_SIGNAL_BUFFER_MAX": "lots"},
        {"FOLIOT_SIGNAL_BUFFER_MAX_BYTES": "1000"},  # below the payload cap
    ],
)
def test_bad_settings_stop_the_start(env: dict[str, str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_env(env)


def test_signal_buffer_bounds() -> None:
    s = Settings.from_env({"FOLIOT_SIGNAL_BUFFER_MAX": "10", "FOLIOT_SIGNAL_BUFFER_MAX_BYTES": "300000"})
    assert (s.signal_buffer_max, s.signal_buffer_max_bytes) == (10, 300_000)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://foliot:s3cret@db.example:5432/foliot",
            "postgresql://foliot:***@db.example:5432/foliot",
        ),
        ("postgresql://foliot:p%40ss@db/f?sslmode=require", "postgresql://foliot:***@db/f?sslmode=require"),
        ("postgresql://foliot@db/foliot", "postgresql://foliot@db/foliot"),
        ("postgres://:pw@[::1]:5432/x", "postgres://:***@[::1]:5432/x"),
        ("sqlite:///./.foliot/foliot.db", "sqlite:///./.foliot/foliot.db"),
    ],
)
def test_database_urls_are_logged_without_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_latency_gate_settings() -> None:
    s = Settings.from_env({})
    assert (s.admission_target_ms, s.admission_interval_ms) == (100, 200)  # on by default
    s = Settings.from_env({"FOLIOT_ADMISSION_TARGET_MS": "250", "FOLIOT_ADMISSION_INTERVAL_MS": "500"})
    assert (s.admission_target_ms, s.admission_interval_ms) == (250, 500)
    s = Settings.from_env({"FOLIOT_ADMISSION_TARGET_MS": "-5", "FOLIOT_ADMISSION_INTERVAL_MS": "0"})
    assert (s.admission_target_ms, s.admission_interval_ms) == (0, 1)  # off; never a zero interval


def test_trend_sampling_settings_are_bounded() -> None:
    s = Settings.from_env({})
    assert (s.trend_interval_ms, s.trend_samples) == (10_000, 360)
    s = Settings.from_env({"FOLIOT_TREND_INTERVAL_MS": "5", "FOLIOT_TREND_SAMPLES": "10000000"})
    assert (s.trend_interval_ms, s.trend_samples) == (1_000, 100_000)
    assert Settings.from_env({"FOLIOT_TREND_SAMPLES": "0"}).trend_samples == 2
    assert Settings.from_env({"FOLIOT_TREND_INTERVAL_MS": "0"}).trend_interval_ms == 0  # off


def test_the_lease_ttl_is_read_and_kept_within_bounds() -> None:
    assert Settings.from_env({}).lease_ttl_ms == 10_000
    assert Settings.from_env({"FOLIOT_LEASE_TTL_MS": "4000"}).lease_ttl_ms == 4_000
    assert Settings.from_env({"FOLIOT_LEASE_TTL_MS": "10"}).lease_ttl_ms == 3_000
    assert Settings.from_env({"FOLIOT_LEASE_TTL_MS": "99999999"}).lease_ttl_ms == 600_000


def test_the_switch_interval_gc_freeze_and_connection_bound_settings() -> None:
    s = Settings.from_env({})
    assert (s.switch_interval_us, s.gc_freeze) == (100, True)
    assert (s.max_connections, s.peer_max_connections, s.peer_max_requests, s.head_timeout_ms) == (
        0,
        1_024,
        256,
        10_000,
    )
    s = Settings.from_env(
        {
            "FOLIOT_SWITCH_INTERVAL_US": "250",
            "FOLIOT_GC_FREEZE": "0",
            "FOLIOT_MAX_CONNECTIONS": "5000",
            "FOLIOT_PEER_MAX_CONNECTIONS": "0",
            "FOLIOT_PEER_MAX_REQUESTS": "16",
            "FOLIOT_HEAD_TIMEOUT_MS": "2000",
        }
    )
    assert (s.switch_interval_us, s.gc_freeze) == (250, False)
    assert (s.max_connections, s.peer_max_connections, s.peer_max_requests, s.head_timeout_ms) == (
        5_000,
        0,
        16,
        2_000,
    )
    assert Settings.from_env({"FOLIOT_SWITCH_INTERVAL_US": "1"}).switch_interval_us == 50
    assert Settings.from_env({"FOLIOT_SWITCH_INTERVAL_US": "99999"}).switch_interval_us == 5_000


async def test_serving_shortens_the_thread_switch_interval_and_restores_it(tmp_path: Path) -> None:
    before = sys.getswitchinterval()
    settings = make_settings(tmp_path, switch_interval_us=300)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, settings)
        assert sys.getswitchinterval() == pytest.approx(0.0003)
        nursery.cancel_scope.cancel()
    assert sys.getswitchinterval() == before


def test_the_metrics_label_cap_is_read_and_bounded() -> None:
    assert Settings.from_env({}).metrics_max_label_values == 100
    assert Settings.from_env({"FOLIOT_METRICS_MAX_LABEL_VALUES": "7"}).metrics_max_label_values == 7
    assert Settings.from_env({"FOLIOT_METRICS_MAX_LABEL_VALUES": "-3"}).metrics_max_label_values == 0
    with pytest.raises(SystemExit, match="FOLIOT_METRICS_MAX_LABEL_VALUES"):
        Settings.from_env({"FOLIOT_METRICS_MAX_LABEL_VALUES": "lots"})


def test_schedule_quotas() -> None:
    default = Settings.from_env({})
    assert (default.schedules_per_app, default.schedule_fire_rate_per_app) == (1_000, 10.0)
    s = Settings.from_env({"FOLIOT_SCHEDULES_PER_APP": "5", "FOLIOT_SCHEDULE_FIRE_RATE_PER_APP": "0.5"})
    assert (s.schedules_per_app, s.schedule_fire_rate_per_app) == (5, 0.5)
    for bad in ("0", "-1", "fast", "inf", "nan"):
        with pytest.raises(SystemExit, match="FOLIOT_SCHEDULE_FIRE_RATE_PER_APP"):
            Settings.from_env({"FOLIOT_SCHEDULE_FIRE_RATE_PER_APP": bad})


def test_open_runs_per_app() -> None:
    assert Settings.from_env({}).app_max_open_runs == 1_000_000
    assert Settings.from_env({"FOLIOT_APP_MAX_OPEN_RUNS": "50"}).app_max_open_runs == 50
    assert Settings.from_env({"FOLIOT_APP_MAX_OPEN_RUNS": "0"}).app_max_open_runs == 1


def test_every_per_app_limit_has_a_setting_and_a_row_in_the_docs() -> None:
    """core/limits.py names each limit's setting and `Settings` field; docs/operations.md's
    *Per-app limits* table lists each with its override name."""
    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    table = docs[docs.index("## Per-app limits") :]
    table = table[: table.index("\n## ")]
    default = Settings()
    for limit in LIMITS:
        assert hasattr(default, limit.field), limit
        assert f"`{limit.setting}`" in table and f"`{limit.name}`" in table, limit
