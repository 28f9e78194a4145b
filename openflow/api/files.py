"""`/runs/{run_id}/handoffs/{node_id}` and `/runs/{run_id}/artifacts/{id}`: a run's files.

Both are read through the run store, so they are served whichever worker wrote them. A handoff
comes back byte for byte as `write_handoff` stored it, with the manifest's `sha256` and
`sizeBytes` in `X-OpenFlow-Sha256` and `X-OpenFlow-Size`; the caller can check it against the
manifest in the run's state.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from fastapi import APIRouter, Path, Response
from starlette.concurrency import run_in_threadpool

from openflow.activities.store import InvalidKey, KeyNotFound, RunStore
from openflow.activities.write_handoff import handoff_segment
from openflow.api.deps import ContextDep, RunsDep
from openflow.api.errors import NotFound, documented
from openflow.api.routing import StrictJsonRoute
from openflow.client import Runs

router = APIRouter(prefix="/runs", tags=["runs"], route_class=StrictJsonRoute)

RunId = Annotated[str, Path(min_length=1, max_length=1000, description="The run id")]
NodeId = Annotated[str, Path(min_length=1, max_length=1000, description="The node id")]
ArtifactId = Annotated[
    str, Path(min_length=1, max_length=200, description="The artifact id, as in `artifact:<id>`")
]

HANDOFF_FILES = (
    ("HANDOFF.md", "text/markdown; charset=utf-8"),
    ("HANDOFF.json", "application/json"),
)
MEDIA_BY_SUFFIX = {
    ".md": "text/markdown; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
}
_ARTIFACT_ID = re.compile(r"[A-Za-z0-9_-]+")
_FILE_RESPONSE = {
    "description": "The file's bytes, with its sha256 and size in headers",
    "headers": {
        "X-OpenFlow-Sha256": {
            "description": "hex SHA-256 of the body",
            "schema": {"type": "string"},
        },
        "X-OpenFlow-Size": {
            "description": "the body's size in bytes",
            "schema": {"type": "integer"},
        },
    },
}


def _file(data: bytes, media_type: str) -> Response:
    return Response(
        content=data,
        media_type=media_type,
        headers={
            "X-OpenFlow-Sha256": hashlib.sha256(data).hexdigest(),
            "X-OpenFlow-Size": str(len(data)),
            "Cache-Control": "no-cache",
        },
    )


def _read(store: RunStore, run_id: str, key: str) -> bytes | None:
    try:
        return store.get_bytes(run_id, key)
    except (KeyNotFound, InvalidKey):
        return None


@router.get(
    "/{run_id}/handoffs/{node_id}",
    response_class=Response,
    responses={
        **documented(401, 404, 422, 503),
        200: {
            **_FILE_RESPONSE,
            "content": {
                "text/markdown": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        },
    },
)
async def get_handoff(
    run_id: RunId, node_id: NodeId, runs: RunsDep, context: ContextDep
) -> Response:
    """The node's handoff (Markdown or JSON) exactly as its worker stored it."""
    await runs.handle(run_id)
    folder = f"handoffs/{handoff_segment(node_id)}"
    found = []
    for name, media in HANDOFF_FILES:
        data = await run_in_threadpool(_read, context.store, run_id, f"{folder}/{name}")
        if data is not None:
            found.append((name, media, data))
    if len(found) > 1:
        found = await _as_in_manifest(runs, run_id, node_id, folder, found)
    if not found:
        raise NotFound(
            f"node {node_id!r} of run {run_id!r} has no handoff yet; it is written when the "
            "node completes",
            code="handoff_not_found",
        )
    _, media, data = found[0]
    return _file(data, media)


async def _as_in_manifest(
    runs: Runs,
    run_id: str,
    node_id: str,
    folder: str,
    found: list[tuple[str, str, bytes]],
) -> list[tuple[str, str, bytes]]:
    """Both formats are stored (the node changed format and re-ran): the manifest decides."""
    state = await runs.state(run_id)
    manifest = state.handoffs.get(node_id) or {}
    uri = manifest.get("uri") if isinstance(manifest, dict) else None
    chosen = [f for f in found if uri == f"run://{folder}/{f[0]}"]
    return chosen or found


@router.get(
    "/{run_id}/artifacts/{artifact_id}",
    response_class=Response,
    responses={
        **documented(401, 404, 422, 503),
        200: {
            **_FILE_RESPONSE,
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        },
    },
)
async def get_artifact(
    run_id: RunId, artifact_id: ArtifactId, runs: RunsDep, context: ContextDep
) -> Response:
    """An artifact of the run: a spilled tool output (`artifact:<id>`) or a sealed plan."""
    await runs.handle(run_id)
    found = None
    if _ARTIFACT_ID.fullmatch(artifact_id):
        found = await run_in_threadpool(_find_artifact, context.store, run_id, artifact_id)
    if found is None:
        raise NotFound(
            f"run {run_id!r} has no artifact {artifact_id!r}; use the id from its "
            "ToolArtifactCreated event or `artifact:<id>` marker",
            code="artifact_not_found",
        )
    key, data = found
    suffix = key[key.rfind(".") :] if "." in key.rpartition("/")[2] else ""
    return _file(data, MEDIA_BY_SUFFIX.get(suffix, "application/octet-stream"))


def _find_artifact(store: RunStore, run_id: str, artifact_id: str) -> tuple[str, bytes] | None:
    """The artifact's key and bytes: `artifacts/<id>`, or `artifacts/<id>-<name>` (one name)."""
    exact = f"artifacts/{artifact_id}"
    prefix = f"{exact}-"
    try:
        keys = store.list(run_id, exact)
    except InvalidKey:
        return None
    for key in sorted(keys, key=lambda k: (k != exact, k)):
        rest = key[len(prefix) :] if key.startswith(prefix) else None
        if key.endswith(".tmp"):
            continue  # a spill being written
        if key == exact or (rest and "-" not in rest and "/" not in rest):
            data = _read(store, run_id, key)
            if data is not None:
                return key, data
    return None


__all__ = ["router"]
