"""Reading a document back after a commit whose answer was lost, for every kind.

A commit can fail after it was sent (`CommitUnknown`: the connection lost during its COMMIT):
it may have landed. Each kind then reads its document back and compares it with what it
wrote (`RunKind.applied`, `SwfKind.landed`, the schedule kind's `_landed`); this is the read,
shielded (a caller going away must not leave the answer unknown) and bounded, and the rule for
when no read can tell: the database perhaps still applying the commit (`settled` false), or
the read failing too. The kind then treats the commit as in doubt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

from ..core.errors import CommitUnknown, StorageError

T = TypeVar("T")

READ_BACK_S: Final = 5.0  # how long reading a document back may take


async def read_back(read: Callable[[], Awaitable[T]], error: StorageError) -> tuple[bool, T | None]:
    """`(True, document)` when `read()` tells what storage holds after the commit that failed
    with `error`; `(False, None)` when nothing can tell now: the database may still be applying
    it (`CommitUnknown.settled` false), or the read failed or took longer than `READ_BACK_S`."""
    if isinstance(error, CommitUnknown) and not error.settled:
        return False, None  # a read now could see the old document of a commit about to land
    with trio.CancelScope(shield=True), trio.move_on_after(READ_BACK_S):
        try:
            return True, await read()
        except StorageError:
            pass
    return False, None
