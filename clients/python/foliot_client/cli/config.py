"""Where the CLI finds the server: flags, then environment, then a profile file (pure)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"


class ConfigError(Exception):
    """The profile file is unreadable, or names no such profile."""


@dataclass(frozen=True)
class Target:
    url: str
    token: str | None
    app: str | None


def config_path(env: Mapping[str, str]) -> Path:
    """`$FOLIOT_CONFIG`, else `$XDG_CONFIG_HOME/foliot/config.toml` (`~/.config/...`)."""
    if env.get("FOLIOT_CONFIG"):
        return Path(env["FOLIOT_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "foliot" / "config.toml"


def load_profiles(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    profiles = document.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(p, dict) for p in profiles.values()):
        raise ConfigError(f"{path}: [profiles.NAME] tables expected")
    return profiles


def resolve(
    *,
    url: str | None,
    token: str | None,
    app: str | None,
    profile: str | None,
    profiles: Mapping[str, Mapping[str, Any]],
    env: Mapping[str, str],
) -> Target:
    """Each setting from the first of: flag, `FOLIOT_URL`/`FOLIOT_TOKEN`/`FOLIOT_APP`, the
    profile (`--profile`, `FOLIOT_PROFILE`, else `default` when the file has one)."""
    name = profile or env.get("FOLIOT_PROFILE") or None
    if name is not None and name not in profiles:
        raise ConfigError(f"no profile {name!r} (known: {', '.join(sorted(profiles)) or 'none'})")
    chosen: Mapping[str, Any] = profiles.get(name or "default", {})

    def pick(flag: str | None, var: str, key: str) -> str | None:
        value = flag or env.get(var) or chosen.get(key)
        return None if value is None else str(value)

    return Target(
        url=pick(url, "FOLIOT_URL", "url") or DEFAULT_URL,
        token=pick(token, "FOLIOT_TOKEN", "token"),
        app=pick(app, "FOLIOT_APP", "app"),
    )
