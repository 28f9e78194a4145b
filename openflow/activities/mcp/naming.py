"""Provider-safe names for MCP tools: `mcp_{len(server)}_{server}_{tool}` (spec 4.8).

Each segment keeps `A-Z a-z 0-9 -`, doubles `_`, and writes any other UTF-8 byte as `_x` and two
uppercase hex digits, so every (server, tool) pair has exactly one name and back.
"""

from __future__ import annotations

import re

PREFIX = "mcp_"
LEGACY_PREFIX = "mcp/"
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_HEAD = re.compile(r"mcp_(0|[1-9][0-9]*)_")
_HEX = frozenset("0123456789ABCDEF")


def encode_segment(segment: str) -> str:
    """One server id or tool name as a provider-safe segment."""
    out: list[str] = []
    for byte in segment.encode("utf-8"):
        if byte in _KEPT:
            out.append(chr(byte))
        elif byte == ord("_"):
            out.append("__")
        else:
            out.append(f"_x{byte:02X}")
    return "".join(out)


def decode_segment(encoded: str) -> str | None:
    """The segment `encoded` stands for, or None when it is not the canonical encoding of one."""
    raw = bytearray()
    i = 0
    while i < len(encoded):
        ch = encoded[i]
        if ch != "_":
            if ord(ch) >= 128 or ord(ch) not in _KEPT:
                return None
            raw.append(ord(ch))
            i += 1
        elif encoded[i + 1 : i + 2] == "_":
            raw.append(ord("_"))
            i += 2
        elif encoded[i + 1 : i + 2] == "x" and set(encoded[i + 2 : i + 4]) <= _HEX:
            digits = encoded[i + 2 : i + 4]
            if len(digits) != 2:
                return None
            raw.append(int(digits, 16))
            i += 4
        else:
            return None
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return decoded if encode_segment(decoded) == encoded else None


def tool_name(server_id: str, tool: str) -> str:
    """The namespaced name a model sees for `tool` of `server_id`; both must be non-empty."""
    if not server_id or not tool:
        raise ValueError("an MCP server id and tool name must both be non-empty")
    server = encode_segment(server_id)
    return f"{PREFIX}{len(server)}_{server}_{encode_segment(tool)}"


def parse_tool_name(name: str) -> tuple[str, str] | None:
    """(server id, tool) for a namespaced or legacy `mcp/{server}/{tool}` name, else None."""
    if name.startswith(LEGACY_PREFIX):
        server, sep, tool = name[len(LEGACY_PREFIX) :].partition("/")
        return (server, tool) if sep and server and tool else None
    head = _HEAD.match(name)
    if head is None:
        return None
    start = head.end()
    length = int(head.group(1))
    encoded_server = name[start : start + length]
    if len(encoded_server) != length or name[start + length : start + length + 1] != "_":
        return None
    server_id = decode_segment(encoded_server)
    tool_id = decode_segment(name[start + length + 1 :])
    if not server_id or not tool_id:
        return None
    return server_id, tool_id


def is_mcp_name(name: str) -> bool:
    """Whether `name` is an MCP tool name in either form."""
    return parse_tool_name(name) is not None


__all__ = [
    "LEGACY_PREFIX",
    "PREFIX",
    "decode_segment",
    "encode_segment",
    "is_mcp_name",
    "parse_tool_name",
    "tool_name",
]
