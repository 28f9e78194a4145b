"""Helpers for the MCP tests: settings entries for the test servers and the HTTP server itself."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

STDIO_SERVER = Path(__file__).with_name("mcp_stdio_server.py")


def stdio_config(**extra: Any) -> dict[str, Any]:
    """settings.json's entry for the stdio test server."""
    return {"transport": "stdio", "command": sys.executable, "args": [str(STDIO_SERVER)], **extra}


def write_mcp_settings(home: Path, servers: dict[str, Any]) -> None:
    """Put `servers` under `mcp.servers` in settings.json, keeping what else it holds."""
    path = home / "settings.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["mcp"] = {"servers": servers}
    path.write_text(json.dumps(data, indent=2))


def http_app_server() -> MCPServer:
    """The HTTP test server: a lookup tool and one that reports an error."""
    server = MCPServer("test-http")

    @server.tool(name="lookup", description="Look a word up.")
    def lookup(word: str) -> str:
        return f"{word}: found"

    @server.tool(name="refuse", description="Refuses every request.")
    def refuse() -> str:
        raise ToolError("not today")

    return server


@dataclass
class HttpMcp:
    """A running streamable HTTP MCP server on 127.0.0.1."""

    server: MCPServer
    url: str
    uvicorn: uvicorn.Server

    def config(self, **extra: Any) -> dict[str, Any]:
        return {"transport": "http", "url": self.url, **extra}
