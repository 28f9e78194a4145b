"""`openflow worker`, loaded ahead and started on a line from stdin: a warm replacement.

The chaos campaign keeps one of these waiting, so the time it measures after a kill -9 is the
time a run takes to move on to a new worker, not the time Python takes to import one.
"""

from __future__ import annotations

import sys

import openflow.activities.tools.process  # noqa: F401 - loaded ahead of the start line
import openflow.worker  # noqa: F401 - loaded ahead of the start line
from openflow.cli import main

if __name__ == "__main__":
    print("standby", flush=True)
    if not sys.stdin.readline():
        sys.exit(0)
    sys.exit(main(["worker"]))
