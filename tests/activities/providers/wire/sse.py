"""Server-sent event framing shared by the SSE wires."""

from __future__ import annotations

import json
from typing import Any


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event: optional `event:` line, one `data:` line, blank line."""
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def split_args(arguments: str) -> list[str]:
    """Tool arguments streamed in two fragments, as models do."""
    middle = len(arguments) // 2
    return [part for part in (arguments[:middle], arguments[middle:]) if part]
