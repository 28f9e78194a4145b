"""An approval action as the engine's `ApprovalDecided` fact, which decides a batch as a whole.

An approval may decide its calls one by one (`decisions`), edit a call's arguments or grant
later calls (`remember`). The engine's fact carries one decision for the whole batch, so an
action applies when it amounts to one: every call of the batch allowed, or every call denied
with one reason. Anything else becomes an `ActionMalformed` fact (a signal's payload is then
recorded as ignored; the `act` validator rejects it with the reason), and the batch stays
pending: a call is never run or denied other than as the person decided it.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from openflow import contracts as c
    from openflow.engine.state import ActionMalformed, ApprovalDecided, RunSnapshot
    from openflow.workflows.handlers import describe

#: Why an action that decides calls differently cannot be applied as one batch decision.
WHOLE_BATCH_ONLY = (
    "this worker decides an approval as a whole: allow every call of {approval!r}, or deny "
    "every call with one reason, without edited arguments or remember"
)


def approval_fact(
    action: c.Action, snapshot: RunSnapshot | None, source: str
) -> ApprovalDecided | ActionMalformed:
    """The batch decision the action amounts to; `source` is the signal or update it came by."""
    approval_id = action.approval_id or ""
    if not action.decisions and action.remember is None:
        return ApprovalDecided(
            approval_id=approval_id, allow=bool(action.allow), reason=action.reason
        )
    batch = snapshot.batches.get(approval_id) if snapshot is not None else None

    def malformed(reason: str) -> ActionMalformed:
        payload = describe(action.model_dump(exclude_none=True, exclude_defaults=True))
        return ActionMalformed(signal=source, action="approval", reason=reason, payload=payload)

    if batch is None or not batch.requires_approval:
        # The engine's own words for it; no batch decision is guessed from the calls'.
        return malformed(f"no pending approval {approval_id!r}")
    call_ids = [call.id for call in batch.calls]
    unknown = sorted({d.call_id for d in action.decisions} - set(call_ids))
    if unknown:
        return malformed(f"decisions: no call {unknown[0]!r} in approval {approval_id!r}")
    decided = [action.decision_for(call_id) for call_id in call_ids]
    undecided = [
        call_id for call_id, (allow, _) in zip(call_ids, decided, strict=True) if allow is None
    ]
    if undecided:
        return malformed(
            f"decisions: call {undecided[0]!r} of approval {approval_id!r} has no decision; "
            "decide every call, or give allow for the calls left out"
        )
    allows = {allow for allow, _ in decided}
    reasons = {reason for allow, reason in decided if not allow}
    edited = any(d.arguments is not None for d in action.decisions)
    if len(allows) > 1 or len(reasons) > 1 or edited or action.remember is not None:
        return malformed(WHOLE_BATCH_ONLY.format(approval=approval_id))
    whole = allows.pop()
    reason = reasons.pop() if reasons else None
    return ApprovalDecided(approval_id=approval_id, allow=bool(whole), reason=reason)


__all__ = ["WHOLE_BATCH_ONLY", "approval_fact"]
