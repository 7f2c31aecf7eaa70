"""One path for every start (issue 38): a run is created only by `Runs.begin`, so a rule added to
new runs (a concurrency key's queue, the per-app limits) cannot miss a path again.

The product's source is read, not run: a new call of `machine.start` outside `Runs.begin`, or a
new caller of `begin`/`start` that is not listed here, fails this test until it is listed (and
the rule it must keep is checked for it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import foliot

ROOT = Path(foliot.__file__).parent


def _walk() -> Iterator[tuple[str, str, ast.Call]]:
    """(module, function, call) for every call inside a function of the product outside the
    pure core (the dry-run's replay in `core/workflow/deploy.py` starts nothing)."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("core/"):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(func):
                    if isinstance(node, ast.Call):
                        yield rel, func.name, node


def _calls(attr: str) -> set[str]:
    """`module:function:owner` of every call of `<owner>.<attr>(...)`."""
    found: set[str] = set()
    for rel, name, call in _walk():
        if isinstance(call.func, ast.Attribute) and call.func.attr == attr:
            owner = call.func.value
            who = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            found.add(f"{rel}:{name}:{who}")
    return found


def test_machine_start_is_called_only_by_runs_begin() -> None:
    run_starts = {c for c in _calls("start") if c.endswith(":machine")}
    assert run_starts == {"kinds/run/service.py:begin:machine"}


def test_every_caller_of_begin_is_a_known_start_path() -> None:
    runs_begin = {c for c in _calls("begin") if c.startswith("kinds/run/") or ":runs" in c}
    assert runs_begin == {
        "kinds/run/service.py:start:self",
        "kinds/run/children.py:_settle:runs",
        "kinds/run/signal_start.py:_start:runs",
    }


def test_every_caller_of_runs_start_is_a_known_start_path() -> None:
    callers = {c for c in _calls("start") if c.endswith(":runs")}
    assert callers == {
        "http/runs.py:start_run_call:runs",  # POST /apps/{app}/runs
        "kinds/run/debounce.py:debounced_start:runs",  # a debounced burst's run
        "kinds/schedule/actor.py:_start:runs",  # a schedule's fire
    }


# Each caller of `begin` -> the function on its path that checks the app's open-runs limit
# (`Runs.within_open_runs`, issue 37) before it: a child's is `children.settle`, which alone calls
# `_settle` (for the whole tree at once).
OPEN_RUNS_CHECKED_BY: dict[str, str] = {
    "kinds/run/service.py:start:self": "kinds/run/service.py:start:self",
    "kinds/run/children.py:_settle:runs": "kinds/run/children.py:settle:runs",
    "kinds/run/signal_start.py:_start:runs": "kinds/run/signal_start.py:_start:runs",
}


def test_every_start_path_checks_the_apps_open_runs_limit() -> None:
    """A new caller of `begin` fails here until its path checks the limit; a path that stops
    calling `within_open_runs` fails too."""
    runs_begin = {c for c in _calls("begin") if c.startswith("kinds/run/") or ":runs" in c}
    assert runs_begin == set(OPEN_RUNS_CHECKED_BY)
    checks = _calls("within_open_runs")
    missing = sorted(set(OPEN_RUNS_CHECKED_BY.values()) - checks)
    assert not missing, f"start paths that skip the open-runs check: {missing}"
    # `_settle` (which begins children) is reached only through `settle`, and itself.
    assert _calls_of_name("_settle") == {"kinds/run/children.py:settle:", "kinds/run/children.py:_settle:"}


def _calls_of_name(name: str) -> set[str]:
    """`module:function:` of every plain call `name(...)`."""
    return {
        f"{rel}:{func}:"
        for rel, func, call in _walk()
        if isinstance(call.func, ast.Name) and call.func.id == name
    }
