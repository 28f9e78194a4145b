"""Register OpenFlow's search attributes on a Temporal cluster (safe to run again).

It connects like every OpenFlow command (`openflow.connect`: TEMPORAL_* or OPENFLOW_* settings).
"""

from __future__ import annotations

import asyncio
import sys

from openflow.connect import ConnectError, connect
from openflow.server import ServerError, ensure_search_attributes


async def main() -> int:
    try:
        client = await connect()
        added = await ensure_search_attributes(client)
    except (ConnectError, ServerError) as exc:
        print(f"register: {exc}", file=sys.stderr)
        return 2
    print("registered: " + (", ".join(added) if added else "nothing new"))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
