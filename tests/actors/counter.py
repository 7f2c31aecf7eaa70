"""A tiny machine of the tests' own for the generic runtime (not a Foliot run): a counter.

`Add` changes it, `Arm` arms a timer whose firing (`Fire`) adds one, `Close` closes it, `Busy`
says something is in flight (not parked), `Hold` changes nothing (a kind may hold its drain
on it), `Boom` is a bug. Used by `test_runtime.py` (on a full node) and `test_host.py` (on a
fake host).
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Timer:
    kind: str
    key: str
    due: int


@attrs.frozen
class Counter:
    version: int = 0
    total: int = 0
    open: bool = True
    busy: bool = False  # something in flight: the actor may not be passivated
    timer: Timer | None = None
    armings: int = 0


@attrs.frozen
class Add:
    n: int


@attrs.frozen
class Arm:
    at: int


@attrs.frozen
class Fire:
    slot: str
    key: str


@attrs.frozen
class Close:
    pass


@attrs.frozen
class Busy:
    busy: bool


@attrs.frozen
class Hold:
    """Keeps the actor's drain busy until the kind's `release` is set."""


@attrs.frozen
class Boom:
    """A bug in the machine."""


def transition(state: Counter, msg: Any) -> Counter:
    if isinstance(msg, Add):
        return attrs.evolve(state, total=state.total + msg.n)
    if isinstance(msg, Arm):
        n = state.armings + 1
        return attrs.evolve(state, timer=Timer("tick", f"tick#{n}", msg.at), armings=n)
    if isinstance(msg, Fire):
        if state.timer is None or state.timer.key != msg.key:
            return state  # stale
        return attrs.evolve(state, total=state.total + 1, timer=None)
    if isinstance(msg, Close):
        return attrs.evolve(state, open=False, timer=None)
    if isinstance(msg, Busy):
        return attrs.evolve(state, busy=msg.busy)
    if isinstance(msg, Hold):
        return state
    raise RuntimeError("a bug in the machine")
