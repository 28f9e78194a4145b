"""A node's handoff file (spec 7): its bytes, its manifest, and whether a stored one is it.

The model turn that submits writes the file; the `write_handoff` activity writes it when the
turn did not. Both write what `handoff_file` gives, so the engine can tell from a manifest
alone whether the file stored is the one its accepted submission makes.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from openflow.engine.pretty import pretty_json

HANDOFF_LIMIT = 1024 * 1024

HandoffFileFormat = Literal["json", "markdown"]


class HandoffFile(BaseModel):
    """What a handoff's bytes are stored as, under `key` in the run store."""

    model_config = ConfigDict(frozen=True)

    key: str
    data: bytes
    manifest: dict[str, Any]


def handoff_segment(node_id: str) -> str:
    """A node id as one safe path segment (spec 7)."""
    return quote(node_id, safe="-_.")


def handoff_file(node_id: str, fmt: HandoffFileFormat, output: Any) -> HandoffFile | str:
    """The file a node's submitted `output` is stored as, or why it cannot be."""
    if fmt == "markdown":
        markdown = output.get("markdown") if isinstance(output, dict) else None
        if not isinstance(markdown, str):
            return "the Markdown handoff has no `markdown` text"
        data = markdown.encode()
    else:
        data = (pretty_json(output) + "\n").encode()
    if len(data) > HANDOFF_LIMIT:
        return f"the handoff is {len(data)} bytes; the limit is 1 MiB"
    return HandoffFile(
        key=handoff_key(node_id, fmt), data=data, manifest=handoff_manifest(node_id, fmt, data)
    )


@functools.lru_cache(maxsize=4096)
def handoff_key(node_id: str, fmt: HandoffFileFormat) -> str:
    """Where a node's handoff file is in the run store."""
    name = "HANDOFF.md" if fmt == "markdown" else "HANDOFF.json"
    return f"handoffs/{handoff_segment(node_id)}/{name}"


def handoff_manifest(node_id: str, fmt: HandoffFileFormat, data: bytes) -> dict[str, Any]:
    """The manifest of a node's handoff file holding `data`."""
    return {
        "format": fmt,
        "uri": f"run://{handoff_key(node_id, fmt)}",
        "mediaType": "text/markdown" if fmt == "markdown" else "application/json",
        "sha256": hashlib.sha256(data).hexdigest(),
        "sizeBytes": len(data),
    }


def written_as(
    node_id: str, fmt: HandoffFileFormat, output: Any, manifest: dict[str, Any] | None
) -> bool:
    """Whether `manifest` (what a model turn says it stored) is the handoff of `output`."""
    if manifest is None:
        return False
    expected = handoff_file(node_id, fmt, output)
    return isinstance(expected, HandoffFile) and expected.manifest == manifest


def handoff_output(fmt: HandoffFileFormat, output: Any, message: str) -> Any:
    """The node's stored output once its handoff is stored: a Markdown handoff's is a summary
    (spec 7), a JSON one's is the output itself."""
    if fmt == "markdown":
        return {"summary": message.strip() or "See the Markdown handoff artifact."}
    return output


__all__ = [
    "HANDOFF_LIMIT",
    "HandoffFile",
    "HandoffFileFormat",
    "handoff_file",
    "handoff_key",
    "handoff_manifest",
    "handoff_output",
    "handoff_segment",
    "written_as",
]
