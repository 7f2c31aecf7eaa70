"""`python -m tests.sim`: run seeds for a while (see tests/sim/runner.py)."""

import sys

from .runner import main

sys.exit(main())
