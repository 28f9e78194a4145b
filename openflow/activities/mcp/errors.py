"""Errors of the MCP client; tool calls report theirs to the model as `[kind] ...` results.

McpError
├── McpConfigError     `mcp` in settings.json cannot be read
└── McpUnavailable     a server did not start, answer or list its tools in time
"""

from __future__ import annotations


class McpError(Exception):
    """Something went wrong talking to the configured MCP servers."""


class McpConfigError(McpError):
    """`mcp` in settings.json has a shape this worker cannot read."""


class McpUnavailable(McpError):
    """A server could not be reached; the message says why without quoting secrets."""


__all__ = ["McpConfigError", "McpError", "McpUnavailable"]
