"""Run ids."""

from __future__ import annotations

import secrets


def new_run_id() -> str:
    return "run_" + secrets.token_hex(12)
