"""Run an OpenFlow worker: `python worker.py` (the same as `openflow worker`).

It connects to $OPENFLOW_TEMPORAL_ADDRESS (default 127.0.0.1:7233), namespace
$OPENFLOW_NAMESPACE, polls $OPENFLOW_TASK_QUEUE and keeps run files in $OPENFLOW_HOME,
until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import sys

from openflow.cli import main

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
