"""Run ids and task tokens."""

from __future__ import annotations

import secrets


def new_run_id() -> str:
    return "run_" + secrets.token_hex(12)


def new_task_token() -> str:
    return "tt_" + secrets.token_urlsafe(24)
