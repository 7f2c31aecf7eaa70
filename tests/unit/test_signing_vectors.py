"""The engine's `foliot.signing` against the vectors both signers share (tests/client)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foliot import signing
from tests.client import make_vectors

VECTORS = json.loads((Path(__file__).parents[1] / "client" / "signing_vectors.json").read_text())["vectors"]


def test_the_vectors_file_is_what_the_engine_generates() -> None:
    assert make_vectors.vectors() == VECTORS


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_engine_agrees_with_each_vector(vector: dict[str, object]) -> None:
    assert make_vectors.expected(vector) is vector["valid"]
    if vector["valid"]:
        assert (
            signing.verify_signature(
                str(vector["body"]).encode(),
                vector["header"],
                vector["secrets"],
                now=vector["now"],  # type: ignore[arg-type]
            )
            == int(str(vector["header"]).split(",")[0][2:])
        )
