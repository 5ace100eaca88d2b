"""``python -m sim.cli``: the ``kvsim`` command without the console script.

Invariant: the same entry point as ``kvsim`` (``sim.cli.main``): same commands, same exit
statuses, user errors as one line on stderr with status 2.
"""

from __future__ import annotations

import sys

from sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
