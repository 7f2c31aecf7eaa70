"""The seeded simulation of the runtime for a while (tests/sim): seeds per minute and failures.

`python bench/simulate.py --seconds 600 --jobs 2 --floor` (the same options as
`python -m tests.sim`; see tests/sim/README.md). `--quick`: 20 seconds on one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sim.runner import main  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--quick" in argv:
        argv = [a for a in argv if a != "--quick"] + ["--seconds", "20", "--floor"]
    sys.exit(main(argv))
