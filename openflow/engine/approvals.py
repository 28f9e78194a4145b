"""People's approval decisions, call by call, and the grants they remember (spec 4.4, extended).

An `ApprovalDecided` fact decides each call of a batch: the calls it allows run (with the
arguments a person gave instead, when edited), the calls it denies get a denial result with
their own reason, so the model sees a result for every call. A decision for the whole batch
(`allow` alone) is the case where every call is decided the same way.

A remembered `Grant` lets later calls of its tool (with every path under its prefix, when it has
one) run without a pause for the rest of the run. It only ever turns a call that would ask into
one that runs: a call its node's approval mode or Plan Mode denies stays denied, and the plan
seal always asks. The same functions decide a node's batches and a subagent's (`Seat`).
"""

from __future__ import annotations

import json
from typing import Any

from openflow.engine import prompts
from openflow.engine.build import offered_tools
from openflow.engine.conversation import Seat, add_result, append
from openflow.engine.events import (
    DEFAULT_DENIAL_REASON,
    GrantAdded,
    ToolApproved,
    ToolDenied,
)
from openflow.engine.events import (
    GrantRevoked as GrantRevokedEvent,
)
from openflow.engine.grants import grant_for, under
from openflow.engine.policy import SEAL_TOOL, batch_has_side_effects
from openflow.engine.state import (
    ApprovalDecided,
    Grant,
    GrantRevoked,
    PendingBatch,
    RunSnapshot,
)
from openflow.engine.step import Step
from openflow.engine.transcript import ToolCall, UserItem
from openflow.engine.turn import call_decision, relativize

#: How much of an edited call's arguments the note to the model shows.
EDIT_NOTE_CHARS = 2000


# --- grants ---------------------------------------------------------------------------


def grant_problem(step: Step, node_id: str, grant: Grant) -> str | None:
    """Why a grant made on `node_id`'s approval would let more than its mode allows, or None."""
    if grant.tool == SEAL_TOOL:
        return f"remember: {SEAL_TOOL!r} always asks; approve each seal on its own"
    mode = step.approval_mode(node_id)
    if mode == "read_only" and step.tier_of(grant.tool) == "write":
        return (
            f"remember: node {node_id!r} is read-only, so a grant cannot let {grant.tool!r} "
            "run; grant a read tool, or leave remember out"
        )
    prefix = grant.path_prefix
    if prefix is not None and not under(prefix, "."):
        return f"remember.path_prefix: {prefix!r} leaves the folder; give a path inside it"
    return None


def add_grant(step: Step, grant: Grant) -> None:
    s = step.s
    s.grants = [g for g in s.grants if (g.tool, g.path_prefix) != (grant.tool, grant.path_prefix)]
    s.grants.append(grant)
    step.emit(
        GrantAdded(
            node_id=grant.node_id, tool=grant.tool, path_prefix=grant.path_prefix, by=grant.by
        )
    )


def revoke_problem(s: RunSnapshot, fact: GrantRevoked) -> str | None:
    if any((g.tool, g.path_prefix) == (fact.tool, fact.path_prefix) for g in s.grants):
        return None
    wanted = Grant(tool=fact.tool, path_prefix=fact.path_prefix).label
    held = ", ".join(g.label for g in s.grants) or "none"
    return f"no grant {wanted!r} to revoke (grants: {held})"


def revoke(step: Step, fact: GrantRevoked) -> None:
    key = (fact.tool, fact.path_prefix)
    step.s.grants = [g for g in step.s.grants if (g.tool, g.path_prefix) != key]
    step.emit(GrantRevokedEvent(tool=fact.tool, path_prefix=fact.path_prefix, by=fact.by))


# --- decisions --------------------------------------------------------------------------


def verdict(
    fact: ApprovalDecided, batch: PendingBatch, call: ToolCall
) -> tuple[bool | None, str | None, dict[str, Any] | None]:
    """Whether the fact allows `call` (None: undecided), a denial's reason and any edit."""
    for decision in fact.decisions:
        if decision.call_id == call.id:
            return decision.allow, decision.reason or fact.reason, decision.arguments
    if fact.allow is None and call.id in batch.granted:
        return True, None, None
    return fact.allow, fact.reason, None


def refusal(step: Step, node_id: str, call: ToolCall) -> str | None:
    """Why the node's policy would not let `call` run (tier, Plan Mode, the tools offered)."""
    offered = set(offered_tools(step, node_id)) if step.s.tool_names is not None else None
    decision = call_decision(step, node_id, call, offered)
    return None if decision in ("allow", "prompt") else decision


def normalized(step: Step, fact: ApprovalDecided) -> ApprovalDecided:
    """The fact with its grant's prefix relative to the folder, as calls' paths are."""
    grant = fact.remember
    if grant is None or grant.path_prefix is None:
        return fact
    prefix = relativize(step, {"path": grant.path_prefix})["path"]
    return fact.model_copy(update={"remember": grant.model_copy(update={"path_prefix": prefix})})


def decision_problem(step: Step, fact: ApprovalDecided) -> str | None:
    """Why the fact cannot decide its batch as it says, or None: an edited call is checked
    like any call the model makes, a grant against the node's approval mode."""
    fact = normalized(step, fact)
    approval_id = fact.approval_id
    batch = step.s.batches.get(approval_id)
    if batch is None or not batch.requires_approval:
        return f"no pending approval {approval_id!r}"
    ids = [call.id for call in batch.calls]
    seen: set[str] = set()
    for i, decision in enumerate(fact.decisions):
        if decision.call_id not in ids:
            return (
                f"decisions[{i}].call_id: no call {decision.call_id!r} in approval {approval_id!r}"
            )
        if decision.call_id in seen:
            return f"decisions[{i}]: call {decision.call_id!r} is decided twice"
        seen.add(decision.call_id)
        if decision.arguments is not None and not decision.allow:
            return f"decisions[{i}].arguments: only an allowed call can be edited"
    for call in batch.calls:
        allow, _reason, arguments = verdict(fact, batch, call)
        if allow is None:
            return (
                f"decisions: call {call.id!r} of approval {approval_id!r} has no decision; "
                "decide every call, or give allow for the calls left out"
            )
        if arguments is not None:
            edited = call.model_copy(update={"arguments": arguments})
            problem = refusal(step, batch.node_id, relativized(step, edited))
            if problem is not None:
                return f"decisions: the edited call {call.id!r} is refused: {problem}"
    if fact.remember is not None:
        return grant_problem(step, batch.node_id, fact.remember)
    return None


def batch_seat(step: Step, batch: PendingBatch) -> Seat | None:
    """The conversation a batch answers; None for a subagent's that is no longer running."""
    if batch.subagent_id is None:
        return Seat(batch.node_id)
    child = step.s.nodes[batch.node_id].child
    if child is None or child.subagent_id != batch.subagent_id:
        return None
    return Seat(batch.node_id, child.subagent_id)


def relativized(step: Step, call: ToolCall) -> ToolCall:
    return call.model_copy(update={"arguments": relativize(step, call.arguments)})


def decide(step: Step, fact: ApprovalDecided) -> None:
    """Apply a checked decision: run the allowed calls (as edited), answer the denied ones."""
    fact = normalized(step, fact)
    batch = step.s.batches[fact.approval_id]
    seat = batch_seat(step, batch) or Seat(batch.node_id)
    allowed: list[ToolCall] = []
    changed = False
    for call in batch.calls:
        allow, reason, arguments = verdict(fact, batch, call)
        granted = call.id in batch.granted and not any(d.call_id == call.id for d in fact.decisions)
        grant = grant_for(step.s, call) if granted and allow else None
        if allow:
            if arguments is not None:
                edited = relativized(step, call.model_copy(update={"arguments": arguments}))
                batch.edited[call.id] = dict(call.arguments)
                call, changed = edited, True
            allowed.append(call)
            step.emit(
                ToolApproved(
                    approval_id=batch.batch_id,
                    node_id=batch.node_id,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    by=grant.by if grant is not None else fact.by,
                    arguments=call.arguments if arguments is not None else None,
                    grant=grant.label if grant is not None else None,
                )
            )
            continue
        changed = True
        step.emit(
            ToolDenied(
                approval_id=batch.batch_id,
                node_id=batch.node_id,
                tool_call_id=call.id,
                tool_name=call.name,
                reason=reason or DEFAULT_DENIAL_REASON,
                by=fact.by,
            )
        )
        add_result(step, seat, call, prompts.denial_result(reason), is_error=True)
    if fact.remember is not None:
        grant = fact.remember.model_copy(
            update={"node_id": batch.node_id, "by": fact.by, "at_ms": step.now}
        )
        add_grant(step, grant)
    if not allowed:
        step.s.batches.pop(batch.batch_id)
        return
    batch.requires_approval = False
    if changed:
        batch.calls = allowed
        batch.side_effects = batch_has_side_effects(
            [c.name for c in allowed], [c.arguments for c in allowed]
        )


def edit_note(call: ToolCall, original: dict[str, Any]) -> str:
    """What the model is told about a call a person edited before it ran."""
    shown = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
    if len(shown) > EDIT_NOTE_CHARS:
        shown = shown[:EDIT_NOTE_CHARS] + "…"
    changed = sorted(
        k for k in {*call.arguments, *original} if call.arguments.get(k) != original.get(k)
    )
    return (
        f"[edited by the user] Your call {call.name} ({call.id}) was edited before it ran "
        f"(changed: {', '.join(changed) or 'nothing'}). It ran with these arguments instead of "
        f"yours: {shown}"
    )


def note_edits(step: Step, seat: Seat, batch: PendingBatch) -> None:
    """After an edited batch's results, tell the model which calls ran as edited and how."""
    for call in batch.calls:
        original = batch.edited.get(call.id)
        if original is not None:
            append(step, seat, UserItem(content=edit_note(call, original)))


__all__ = [
    "EDIT_NOTE_CHARS",
    "add_grant",
    "batch_seat",
    "decide",
    "decision_problem",
    "edit_note",
    "grant_problem",
    "note_edits",
    "refusal",
    "revoke",
    "revoke_problem",
]
