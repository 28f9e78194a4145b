"""`python -m openflow.cli`: the `openflow` command."""

from openflow.cli import main

raise SystemExit(main())
