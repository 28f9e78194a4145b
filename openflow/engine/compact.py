"""What continue-as-new carries: the snapshot without the transcript history the store keeps.

A node's transcript is persisted in the run store up to `persisted_len`; the engine only looks
at recent items (dangling calls, the last writes, the last narration), so older persisted items
can be dropped from the carried snapshot. `transcript_offset` keeps positions absolute.
"""

from __future__ import annotations

from openflow.engine.state import RunSnapshot

KEEP_RECENT = 64


def compact(snapshot: RunSnapshot, keep: int | None = None) -> RunSnapshot:
    """The snapshot with each node's persisted transcript trimmed to its last `keep` items."""
    keep = KEEP_RECENT if keep is None else keep
    nodes = {}
    for node_id, ns in snapshot.nodes.items():
        persisted_here = max(ns.persisted_len - ns.transcript_offset, 0)
        drop = max(0, min(persisted_here, len(ns.transcript) - keep))
        if drop:
            ns = ns.model_copy(
                update={
                    "transcript": ns.transcript[drop:],
                    "origins": ns.origins[drop:],
                    "transcript_offset": ns.transcript_offset + drop,
                }
            )
        nodes[node_id] = ns
    return snapshot.model_copy(update={"nodes": nodes})


__all__ = ["KEEP_RECENT", "compact"]
