"""An MCP stdio server that hangs at its first start (it records its pid) and serves at later ones.

The pid files are written before the MCP SDK is imported, so they mark when the process began.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

first = Path(os.environ["SLOW_MCP_FIRST"])
if not first.exists():
    first.write_text(str(os.getpid()))
    time.sleep(120)
Path(os.environ["SLOW_MCP_LATER"]).write_text(str(os.getpid()))

from mcp.server.mcpserver import MCPServer  # noqa: E402 - after the pid file, on purpose

server = MCPServer("slow")


@server.tool(name="ping", description="Answers pong.")
def ping() -> str:
    return "pong"


if __name__ == "__main__":
    server.run()
