"""SWF task tokens: signed, self-describing, bound to a region; anything else is refused."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet

from foliot.core.credentials import Vault
from foliot.core.swf import tokens
from foliot.core.swf.faults import Fault
from foliot.core.swf.tokens import ACTIVITY, DECISION, TaskToken, decode, encode

KEY = b"k" * 32
TOKEN = TaskToken(DECISION, "run-1", 2, 3)


def test_round_trip() -> None:
    for token in (TOKEN, TaskToken(ACTIVITY, "22Ov3MZ2zQLDiBBNpV3EsTLyOx0+hWODp7Wgx4+J0Z+bY=", 5, 9)):
        text = encode(KEY, "us-east-1", token)
        assert text.isascii() and " " not in text
        assert decode(KEY, "us-east-1", text) == token


def test_bound_to_region_and_key() -> None:
    text = encode(KEY, "us-east-1", TOKEN)
    assert decode(KEY, "eu-west-1", text) == tokens.invalid()
    assert decode(b"x" * 32, "us-east-1", text) == tokens.invalid()


def test_every_truncation_and_alteration_is_refused() -> None:
    text = encode(KEY, "us-east-1", TOKEN)
    for n in range(len(text)):
        assert decode(KEY, "us-east-1", text[:n]) == tokens.invalid()
    alphabet = "ABCabc019-_."
    for i, old in enumerate(text):
        for new in alphabet:
            if new == old:
                continue
            altered = text[:i] + new + text[i + 1 :]
            out = decode(KEY, "us-east-1", altered)
            # base64's last character may carry unused bits: an edit there can decode alike.
            assert out == tokens.invalid() or out == TOKEN, altered


def signed(payload: object) -> str:
    raw = json.dumps(payload).encode()
    return f"{tokens._b64(raw)}.{tokens._b64(tokens._mac(KEY, 'r', raw))}"


@pytest.mark.parametrize(
    "payload",
    [
        [2, "decision", "run", 2, 3],  # another format
        [1, "timer", "run", 2, 3],
        [1, "decision", "", 2, 3],
        [1, "decision", 7, 2, 3],
        [1, "decision", "run", "2", 3],
        [1, "decision", "run", 3, 3],  # started before scheduled
        [1, "decision", "run", 0, 3],
        [1, "decision", "run", 2, True],
        [1, "decision", "run", 2],
        {"kind": "decision"},
        "text",
    ],
)
def test_signed_but_malformed_payloads_are_refused(payload: object) -> None:
    assert decode(KEY, "r", signed(payload)) == tokens.invalid()


def test_not_json_or_not_base64_or_too_long() -> None:
    raw = b"not json"
    assert (
        decode(KEY, "r", f"{tokens._b64(raw)}.{tokens._b64(tokens._mac(KEY, 'r', raw))}") == tokens.invalid()
    )
    for text in ("", ".", "a.b.c", "é.x", "a" * 2000, "!!!.???"):
        assert decode(KEY, "r", text) == tokens.invalid()
    fault = tokens.invalid()
    assert isinstance(fault, Fault) and fault.code == "ValidationException"


def test_fits_the_aws_limit_with_the_longest_run_id() -> None:
    text = encode(KEY, "ap-southeast-2", TaskToken(ACTIVITY, "R" * 64, 2**31 - 2, 2**31 - 1))
    assert len(text) <= tokens.MAX_LENGTH
    assert decode(KEY, "ap-southeast-2", text) == TaskToken(ACTIVITY, "R" * 64, 2**31 - 2, 2**31 - 1)


def test_vault_derives_one_key_per_purpose() -> None:
    secret = Fernet.generate_key().decode()
    vault = Vault(secret)
    assert vault.derive_key("swf-task-token") == Vault(secret).derive_key("swf-task-token")
    assert vault.derive_key("swf-task-token") != vault.derive_key("other")
    assert vault.derive_key("swf-task-token") != Vault(Fernet.generate_key().decode()).derive_key(
        "swf-task-token"
    )
    assert len(vault.derive_key("swf-task-token")) == 32
