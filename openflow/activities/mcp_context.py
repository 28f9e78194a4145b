"""MCP context in the run store: large snapshot contents kept out of history, read back in.

A node's MCP resources and prompts are resolved once, when the run starts (spec 2.3 step 9).
A content over `INLINE_BYTES` is stored under `mcp-context/<sha256>.txt` and the snapshot the
workflow carries names it (`contentRef`); the model-turn activity puts it back into the
system message before the provider sees the request. Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from openflow.activities.store import RunStore
from openflow.engine.prompts import MCP_CONTEXT_MARKER, mcp_context_block
from openflow.engine.request import AgentRequest
from openflow.engine.spec import McpContextSnapshot

INLINE_BYTES = 2048
_PREFIX = "mcp-context/"


def stored(store: RunStore, run_id: str, snapshot: McpContextSnapshot) -> McpContextSnapshot:
    """The snapshot as history carries it: a large content stored and named instead."""
    data = snapshot.content.encode("utf-8")
    if len(data) <= INLINE_BYTES:
        return snapshot
    key = f"{_PREFIX}{hashlib.sha256(data).hexdigest()}.txt"
    store.put_bytes(run_id, key, data)
    return snapshot.model_copy(update={"content": "", "content_ref": key})


def _expanded(store: RunStore, run_id: str, message: str) -> str:
    body = message.removeprefix(MCP_CONTEXT_MARKER + "\n")
    snapshots: list[dict[str, Any]] = json.loads(body)
    for snapshot in snapshots:
        key = snapshot.pop("contentRef", None)
        if isinstance(key, str) and key.startswith(_PREFIX):
            snapshot["content"] = store.get_bytes(run_id, key).decode("utf-8")
    return mcp_context_block(snapshots)


def expand_request(store: RunStore, run_id: str, request: AgentRequest) -> AgentRequest:
    """The request with every stored MCP content read back into its system messages."""
    messages = request.system_messages
    if not any(m.startswith(MCP_CONTEXT_MARKER) and "contentRef" in m for m in messages):
        return request
    return request.model_copy(
        update={
            "system_messages": tuple(
                _expanded(store, run_id, m) if m.startswith(MCP_CONTEXT_MARKER) else m
                for m in messages
            )
        }
    )


__all__ = ["INLINE_BYTES", "expand_request", "stored"]
