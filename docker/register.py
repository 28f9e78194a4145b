"""Register OpenFlow's search attributes on a Temporal cluster (safe to run again)."""

from __future__ import annotations

import asyncio

from openflow.server import ensure_search_attributes, temporal_address, temporal_namespace
from openflow.worker import connect


async def main() -> None:
    client = await connect(temporal_address(), temporal_namespace())
    added = await ensure_search_attributes(client)
    print("registered: " + (", ".join(added) if added else "nothing new"))


if __name__ == "__main__":
    asyncio.run(main())
