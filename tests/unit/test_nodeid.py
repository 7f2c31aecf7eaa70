"""A node's name is kept in its data directory (`foliot/nodeid.py`), one process at a time."""

from __future__ import annotations

from pathlib import Path

from foliot.cluster.nodeid import node_id
from foliot.core.config import NODE_ID_RE


def test_a_name_is_made_once_and_kept_across_restarts(tmp_path: Path) -> None:
    with node_id(None, str(tmp_path / "data")) as first:
        assert NODE_ID_RE.fullmatch(first)
    assert (tmp_path / "data" / "node-id").read_text().strip() == first
    with node_id(None, str(tmp_path / "data")) as again:  # the process restarted
        assert again == first


def test_a_second_process_on_the_same_data_directory_gets_a_name_of_its_own(tmp_path: Path) -> None:
    with node_id(None, str(tmp_path)) as first, node_id(None, str(tmp_path)) as second:
        assert second != first and NODE_ID_RE.fullmatch(second)
        assert (tmp_path / "node-id").read_text().strip() == first  # the kept name is untouched
    with node_id(None, str(tmp_path)) as after:  # the first let go: its name is free again
        assert after == first


def test_a_given_name_wins_and_nothing_is_written(tmp_path: Path) -> None:
    with node_id("n1", str(tmp_path / "data")) as name:
        assert name == "n1"
    assert not (tmp_path / "data").exists()


def test_an_unreadable_or_bad_kept_name_is_replaced(tmp_path: Path) -> None:
    for bad in ("", "has space\n", "x" * 49, "\udcff"):
        (tmp_path / "node-id").write_text(bad, errors="surrogateescape")
        with node_id(None, str(tmp_path)) as name:
            assert NODE_ID_RE.fullmatch(name)
        assert (tmp_path / "node-id").read_text().strip() == name
