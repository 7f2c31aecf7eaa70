"""Writes `signing_vectors.json` with the engine's `foliot.signing`: the cases both test suites
(`tests/unit/test_signing_vectors.py`, `tests/client/test_pure.py`) check.

    .venv/bin/python -m tests.client.make_vectors
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from foliot import signing

OUT = Path(__file__).with_name("signing_vectors.json")
T = 1_764_460_800  # 2025-11-30T00:00:00Z
BODY = '{"taskToken":"tt_1","step":"reserve","input":{"note":"<&> \u2028 é"}}'


def case(
    name: str, body: str, header: str | None, secrets: list[str], now: int, valid: bool
) -> dict[str, Any]:
    return {"name": name, "body": body, "header": header, "secrets": secrets, "now": now, "valid": valid}


def vectors() -> list[dict[str, Any]]:
    one = signing.sign(BODY.encode(), ["whsec_a"], T)
    two = signing.sign(BODY.encode(), ["whsec_new", "whsec_old"], T)
    return [
        case("one secret", BODY, one, ["whsec_a"], T, True),
        case("within tolerance", BODY, one, ["whsec_a"], T + 300, True),
        case("stale", BODY, one, ["whsec_a"], T + 301, False),
        case("from the future", BODY, one, ["whsec_a"], T - 301, False),
        case("wrong secret", BODY, one, ["whsec_b"], T, False),
        case("rotation: old secret only", BODY, two, ["whsec_old"], T, True),
        case("rotation: new secret only", BODY, two, ["whsec_new"], T, True),
        case("body changed", BODY.replace("reserve", "reservE"), one, ["whsec_a"], T, False),
        case("empty body", "", signing.sign(b"", ["whsec_a"], T), ["whsec_a"], T, True),
        case("missing header", BODY, None, ["whsec_a"], T, False),
        case("no v1", BODY, f"t={T}", ["whsec_a"], T, False),
        case(
            "upper-case hex",
            BODY,
            one.upper().replace("T=", "t=").replace("V1=", "v1="),
            ["whsec_a"],
            T,
            False,
        ),
        case("two timestamps", BODY, f"t={T},{one}", ["whsec_a"], T, False),
        case("unicode digit", BODY, one.replace(f"t={T}", f"t={T}\u00b2"), ["whsec_a"], T, False),
        case("spaces after commas", BODY, one.replace(",", ", "), ["whsec_a"], T, True),
        case("unknown scheme ignored", BODY, one + ",v0=abc", ["whsec_a"], T, True),
    ]


def expected(v: dict[str, Any]) -> bool:
    try:
        signing.verify_signature(v["body"].encode(), v["header"], v["secrets"], now=v["now"])
    except signing.SignatureError:
        return False
    return True


if __name__ == "__main__":
    cases = vectors()
    for v in cases:
        assert expected(v) == v["valid"], v["name"]
    OUT.write_text(
        json.dumps({"algorithm": "foliot-signature v1", "vectors": cases}, indent=1, ensure_ascii=False)
        + "\n"
    )
    print(f"{len(cases)} vectors -> {OUT}")
