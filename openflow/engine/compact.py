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
        conv = ns.conversation
        persisted_here = max(conv.persisted_len - conv.transcript_offset, 0)
        drop = max(0, min(persisted_here, len(conv.transcript) - keep))
        if drop:
            conv = conv.model_copy(
                update={
                    "transcript": conv.transcript[drop:],
                    "origins": conv.origins[drop:],
                    "transcript_offset": conv.transcript_offset + drop,
                }
            )
            ns = ns.model_copy(update={"conversation": conv})
        nodes[node_id] = ns
    return snapshot.model_copy(update={"nodes": nodes})


__all__ = ["KEEP_RECENT", "compact"]
