"""MCP servers as tools: discovery and pinning at run start, pinned calls in tool batches."""

from openflow.activities.mcp.catalog import (
    MAX_CONCURRENT_SETUPS,
    McpDiscovery,
    McpPin,
    PinnedTool,
    discover_tools,
    pinned_tools,
)
from openflow.activities.mcp.config import McpServerConfig, McpServers, parse_servers
from openflow.activities.mcp.connection import (
    START_TIMEOUT_S,
    McpSessions,
    definition_sha256,
    list_all_tools,
    open_session,
)
from openflow.activities.mcp.context import READ_TIMEOUT_S, resolve_context
from openflow.activities.mcp.errors import McpConfigError, McpError, McpUnavailable
from openflow.activities.mcp.naming import (
    decode_segment,
    encode_segment,
    is_mcp_name,
    parse_tool_name,
    tool_name,
)
from openflow.activities.mcp.tool import (
    CALL_TIMEOUT_S,
    McpTimeout,
    McpTool,
    McpToolRegistry,
    batch_registry,
    render_result,
)

__all__ = [
    "CALL_TIMEOUT_S",
    "MAX_CONCURRENT_SETUPS",
    "READ_TIMEOUT_S",
    "START_TIMEOUT_S",
    "McpConfigError",
    "McpDiscovery",
    "McpError",
    "McpPin",
    "McpServerConfig",
    "McpServers",
    "McpSessions",
    "McpTimeout",
    "McpTool",
    "McpToolRegistry",
    "McpUnavailable",
    "PinnedTool",
    "batch_registry",
    "decode_segment",
    "definition_sha256",
    "discover_tools",
    "encode_segment",
    "is_mcp_name",
    "list_all_tools",
    "open_session",
    "parse_servers",
    "parse_tool_name",
    "pinned_tools",
    "render_result",
    "resolve_context",
    "tool_name",
]
