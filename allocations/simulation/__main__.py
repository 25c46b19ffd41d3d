"""``python -m allocations.simulation FILE [--json OUT|-] [--until T] [--keep-unfit] [--strict]``."""

import sys

from .command_line import main

sys.exit(main())
