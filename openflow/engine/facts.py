"""The reducer's fact dispatch: each fact the shell feeds, folded into the step.

Model replies and failures go to the conversation whose call they answer (a node's, its
output repair's, a subagent's or the post-run review's); tool results, lost and unknown
batches to the conversation that asked for them; people's actions are checked against what
is pending (`check`) and applied, or recorded as ignored.
"""

from __future__ import annotations

from typing import Any, assert_never

from openflow.engine import prompts
from openflow.engine.approvals import (
    batch_seat,
    decide,
    decision_problem,
    note_edits,
    revoke,
    revoke_problem,
)
from openflow.engine.budget import check_budget, held, raised, reached
from openflow.engine.classify import classify_failure
from openflow.engine.conversation import (
    Seat,
    add_result,
    announce_attempt,
    append,
    close_open,
    conversation,
    reset_protocol,
    retry_lost,
    take_call,
    update_conversation,
)
from openflow.engine.events import (
    ActionIgnored,
    ChatMessage,
    EditBatchReverted,
    NodeErrored,
    ToolOutcomeUnknown,
)
from openflow.engine.lifecycle import fail_node, interrupt, interrupt_node, interrupt_problem
from openflow.engine.limits import MAX_MESSAGE_BYTES, text_limit_problem
from openflow.engine.policy import SEAL_TOOL
from openflow.engine.protocol import MAX_MODEL_ATTEMPT, error_text
from openflow.engine.schedule import end_review, on_review_reply
from openflow.engine.state import (
    ActionMalformed,
    ApprovalDecided,
    BatchReverted,
    BudgetSet,
    CancelRequested,
    Fact,
    GrantRevoked,
    HandoffStored,
    InputGiven,
    InterruptRequested,
    MessageSent,
    ModelFailed,
    ModelReplied,
    ReadReceipt,
    Ready,
    ReceiptRead,
    RetryRequested,
    RevertRequested,
    RunSnapshot,
    TimerFired,
    ToolResultSummary,
    ToolsFailed,
    ToolsFinished,
    ToolsLost,
    ToolsOutcomeUnknown,
    stored_reply,
    stored_result,
)
from openflow.engine.step import Step
from openflow.engine.subagents import count_call, fail_child, on_child_error, on_child_reply
from openflow.engine.transcript import Attachment, ToolCall, UserItem
from openflow.engine.turn import (
    announce_approval,
    on_failure,
    on_repair_failure,
    on_repair_reply,
    on_reply,
    pause_for_input,
    record_seal,
    store_output,
)

Action = (
    InputGiven
    | ApprovalDecided
    | GrantRevoked
    | RetryRequested
    | MessageSent
    | InterruptRequested
    | BudgetSet
)

#: How much of an over-long text an ignored-action event keeps.
IGNORED_TEXT_CHARS = 1024


def on_fact(step: Step, fact: Fact) -> None:
    """Fold one fact into the step."""
    s = step.s
    if s.finished and not isinstance(fact, CancelRequested):
        return
    if isinstance(fact, ModelReplied):
        on_model_replied(step, fact)
    elif isinstance(fact, ModelFailed):
        on_model_failed(step, fact)
    elif isinstance(fact, ToolsFinished):
        on_tools_finished(step, fact)
    elif isinstance(fact, ToolsFailed):
        on_tools_failed(step, fact)
    elif isinstance(fact, ToolsOutcomeUnknown):
        on_tools_unknown(step, fact)
    elif isinstance(fact, ToolsLost):
        on_tools_lost(step, fact)
    elif isinstance(fact, ReceiptRead):
        on_receipt_read(step, fact)
    elif isinstance(fact, HandoffStored):
        on_handoff(step, fact)
    elif isinstance(
        fact,
        InputGiven
        | ApprovalDecided
        | GrantRevoked
        | RetryRequested
        | MessageSent
        | InterruptRequested
        | BudgetSet,
    ):
        reason = check(s, fact)
        if reason is not None:
            too_long = s.limits and _text_over_limit(fact) is not None
            action = _ignored_record(fact) if too_long else fact.model_dump(mode="json")
            step.emit(ActionIgnored(action=action, reason=reason))
        else:
            on_action(step, fact)
    elif isinstance(fact, BatchReverted):
        on_batch_reverted(step, fact)
    elif isinstance(fact, ActionMalformed):
        action = {"kind": fact.action, "payload": fact.payload}
        step.emit(ActionIgnored(action=action, reason=fact.reason, signal=fact.signal))
    elif isinstance(fact, TimerFired):
        on_timer(step, fact.node_id)
    elif isinstance(fact, CancelRequested):
        if not s.finished:
            s.cancel_requested = True
    else:
        assert_never(fact)


def on_timer(step: Step, key: str) -> None:
    """A backoff timer fired: its conversation may call again."""
    for node_id, seen in sorted(step.s.nodes.items()):
        child = seen.child
        if child is not None and child.timer_key == key and node_id in step.by_id:
            update_conversation(step, Seat(node_id, child.subagent_id), backoff_until_ms=None)
            return
    if key in step.s.nodes:
        update_conversation(step, Seat(key), backoff_until_ms=None)


# --- model calls ------------------------------------------------------------------------


def on_model_replied(step: Step, fact: ModelReplied) -> None:
    if fact.call_id == step.s.review_call:
        step.time_model(fact.node_id, fact.ms)
        on_review_reply(step, fact.reply)
        return
    taken = take_call(step, fact.call_id)
    if taken is None:
        return
    seat, call = taken
    step.time_model(seat.node_id, fact.ms)
    if call.kind == "repair":
        on_repair_reply(step, seat.node_id, fact.reply)
        return
    settle(step, seat, fact.persisted_len)
    if seat.subagent_id is not None:
        on_child_reply(step, seat, fact.reply, stored_reply(fact))
    else:
        on_reply(
            step,
            seat.node_id,
            fact.reply,
            stored_reply(fact),
            fact.handoff,
            fact.handoff_stored,
        )


def settle(step: Step, seat: Seat, persisted_len: int | None) -> None:
    """A call came back: what the store holds now, and one more call done."""
    if persisted_len is not None:
        update_conversation(step, seat, persisted_len=persisted_len)
    if seat.subagent_id is not None:
        count_call(step, seat)
    else:
        step.update_node(seat.node_id, calls_done=step.node(seat.node_id).calls_done + 1)


def on_model_failed(step: Step, fact: ModelFailed) -> None:
    if fact.call_id == step.s.review_call:
        step.time_model(fact.node_id, fact.ms)
        # No retries: the review is advice, and the run has already succeeded.
        end_review(step, [], f"Reviewer request failed: {fact.failure.message}")
        return
    taken = take_call(step, fact.call_id)
    if taken is None:
        return
    seat, call = taken
    node_id = seat.node_id
    step.time_model(node_id, fact.ms)
    if call.kind == "repair":
        on_repair_failure(step, node_id, fact.failure)
        return
    if fact.refs_missing:
        # The run store lost what the references point at (its blobs are not synced to
        # disk): the next call sends the items themselves. Not the model's failure.
        if fact.persisted_len is not None:
            update_conversation(step, seat, persisted_len=fact.persisted_len)
        update_conversation(step, seat, inline_next=True)
        return
    if fact.lost:
        if fact.persisted_len is not None:
            update_conversation(step, seat, persisted_len=fact.persisted_len)
        display = error_text(classify_failure(fact.failure))
        if not retry_lost(step, seat, display):
            if seat.subagent_id is not None:
                fail_child(step, node_id, display)
            else:
                fail_node(step, node_id, display)
        return
    settle(step, seat, fact.persisted_len)
    if seat.subagent_id is not None:
        on_child_error(step, seat, classify_failure(fact.failure))
    else:
        on_failure(step, node_id, fact.failure)


def on_handoff(step: Step, fact: HandoffStored) -> None:
    if fact.node_id not in step.s.nodes or fact.node_id not in step.by_id:
        return
    job = step.node(fact.node_id).handoff_job
    if job is None:
        return
    step.update_node(fact.node_id, phase=Ready())
    if fact.error is not None or fact.manifest is None:
        fail_node(step, fact.node_id, f"permanent: node handoff could not be stored: {fact.error}")
        return
    output = job.get("output")
    if fact.manifest.get("format") == "markdown":
        message = str(job.get("message") or "").strip()
        output = {"summary": message or "See the Markdown handoff artifact."}
    store_output(step, fact.node_id, output, fact.manifest)


# --- tool batches -----------------------------------------------------------------------


def on_tools_finished(step: Step, fact: ToolsFinished) -> None:
    """Fold a batch's results into the transcript of the conversation that asked; the node
    keeps the file records (a subagent's too)."""
    batch = step.s.batches.get(fact.batch_id)
    if batch is None or not batch.in_flight:
        return
    step.s.batches.pop(fact.batch_id)
    seat = batch_seat(step, batch)
    if seat is None:
        return
    node_id = batch.node_id
    fact = named_results(fact, batch.calls)
    for event in fact.events:
        step.emit_reported(seat.key, event)
    by_id = {r.tool_call_id: (i, r) for i, r in enumerate(fact.results)}
    for call in batch.calls:
        found = by_id.pop(call.id, None)
        if found is None:
            continue
        index, result = found
        step.time_tool(node_id, call.name, fact.ms, index)
        add_result(
            step,
            seat,
            call,
            result.content,
            result.is_error,
            origin=stored_result(fact, index),
            artifact_ids=result.artifact_ids,
            output_meta=result.output_meta,
        )
        if seat.subagent_id is not None or result.is_error:
            continue
        if call.name == SEAL_TOOL and result.artifact_ids:
            record_seal(step, node_id, call, result.artifact_ids)
        if call.name == "read":
            count_read(step, node_id, str(call.arguments.get("path", "")))
    if fact.changed_files or fact.reads:
        ns = step.node(node_id)
        step.update_node(
            node_id,
            changed_files=[*ns.changed_files, *(dict(r) for r in fact.changed_files)],
            reads=[*ns.reads, *(dict(r) for r in fact.reads)],
        )
    if fact.interrupted:
        interrupt(step, node_id)
    else:
        only = batch.calls if seat.subagent_id is not None else None
        close_open(step, seat, prompts.INTERRUPTED_RESULT, only)
    note_edits(step, seat, batch)


def count_read(step: Step, node_id: str, path: str) -> None:
    step.s.read_calls += 1
    for anc in step.ancestors_of(node_id):
        an = step.s.nodes.get(anc)
        if an is not None and any(r.get("path") == path for r in an.reads):
            step.s.redundant_reads += 1
            return


def named_results(fact: ToolsFinished, calls: list[ToolCall]) -> ToolsFinished:
    """The results with the call each answers: a result without its call's id answers the
    call at its index (workers name them; results recorded before may not be)."""
    if all(r.tool_call_id for r in fact.results):
        return fact
    results = tuple(
        r.model_copy(update={"tool_call_id": calls[i].id, "tool_name": calls[i].name})
        if not r.tool_call_id and i < len(calls)
        else r
        for i, r in enumerate(fact.results)
    )
    return fact.model_copy(update={"results": results})


def on_tools_failed(step: Step, fact: ToolsFailed) -> None:
    """A batch's activity failed without results. A read-only batch's calls fail (the model
    sees it and may try again); a side-effecting batch may have run, so it is never sent
    again: it is lost (its receipt is read) or, in runs without receipts, unknown."""
    batch = step.s.batches.get(fact.batch_id)
    if batch is None:
        return
    if not batch.side_effects:
        failed = tuple(
            ToolResultSummary(
                tool_call_id=call.id,
                tool_name=call.name,
                content=f"[failed] {call.name} could not run: the tool worker did not answer",
                is_error=True,
            )
            for call in batch.calls
        )
        on_tools_finished(step, ToolsFinished(batch_id=fact.batch_id, results=failed))
    elif fact.receipts:
        on_tools_lost(step, ToolsLost(batch_id=fact.batch_id, reason=fact.reason))
    else:
        on_tools_unknown(step, ToolsOutcomeUnknown(batch_id=fact.batch_id, reason=fact.reason))


def on_tools_lost(step: Step, fact: ToolsLost) -> None:
    """A batch whose completion was lost is looked up, never sent again: a side-effecting
    batch leaves a receipt of its results before it reports, so one that ran is settled
    with its real results, and one that left none as outcome unknown."""
    batch = step.s.batches.get(fact.batch_id)
    if batch is None or not batch.in_flight or batch.lost:
        return
    batch.lost = True
    step.intents.append(ReadReceipt(batch_id=batch.batch_id, node_id=batch.node_id))


def on_receipt_read(step: Step, fact: ReceiptRead) -> None:
    batch = step.s.batches.get(fact.batch_id)
    if batch is None or not batch.lost:
        return
    if fact.finished is not None and fact.finished.batch_id == fact.batch_id:
        on_tools_finished(step, fact.finished)
    else:
        on_tools_unknown(step, ToolsOutcomeUnknown(batch_id=fact.batch_id, reason=fact.reason))


def on_tools_unknown(step: Step, fact: ToolsOutcomeUnknown) -> None:
    """A side-effecting batch lost with its worker: its calls are settled unknown."""
    batch = step.s.batches.get(fact.batch_id)
    if batch is None or not batch.in_flight:
        return
    step.s.batches.pop(fact.batch_id)
    seat = batch_seat(step, batch)
    if seat is None:
        return
    for call in batch.calls:
        step.emit(ToolOutcomeUnknown(node_id=seat.key, tool_call_id=call.id, tool_name=call.name))
    only = batch.calls if seat.subagent_id is not None else None
    close_open(step, seat, prompts.UNKNOWN_OUTCOME_RESULT, only)


# --- people's actions -------------------------------------------------------------------


def on_action(step: Step, fact: Action) -> None:
    if isinstance(fact, InputGiven):
        if step.node(fact.node_id).awaiting:
            give_input(step, fact.node_id, fact.text, fact.attachments)
        else:  # a failed or interrupted node (`check`): retried with the input as its message
            retry(step, fact.node_id, fact.text, fact.attachments)
    elif isinstance(fact, ApprovalDecided):
        decide(step, fact)
    elif isinstance(fact, GrantRevoked):
        revoke(step, fact)
    elif isinstance(fact, RetryRequested):
        retry(step, fact.node_id, fact.message)
    elif isinstance(fact, InterruptRequested):
        interrupt_node(step, fact.node_id)
    elif isinstance(fact, BudgetSet):
        set_budget(step, fact)
    elif isinstance(fact, MessageSent):
        ns = step.node(fact.node_id)
        if ns.awaiting:
            give_input(step, fact.node_id, fact.text, fact.attachments)
        elif ns.failed is not None or ns.interrupted:
            retry(step, fact.node_id, fact.text, fact.attachments)
        else:
            queued: str | UserItem = fact.text
            if fact.attachments:
                queued = UserItem(content=fact.text, attachments=fact.attachments)
            step.update_node(
                fact.node_id,
                queued_messages=[*ns.queued_messages, queued],
                late_messages=ns.late_messages or fact.deliver_late,
            )
            step.emit(
                ChatMessage(
                    node_id=fact.node_id,
                    role="user",
                    content=fact.text,
                    attachments=fact.attachments,
                )
            )
    else:
        assert_never(fact)


def give_input(
    step: Step, node_id: str, text: str, attachments: tuple[Attachment, ...] = ()
) -> None:
    step.update_node(node_id, phase=Ready())
    append(step, Seat(node_id), UserItem(content=text, attachments=attachments))
    step.emit(ChatMessage(node_id=node_id, role="user", content=text, attachments=attachments))


def retry(
    step: Step, node_id: str, message: str | None, attachments: tuple[Attachment, ...] = ()
) -> None:
    step.update_node(node_id, phase=Ready(), pending_repair=None)
    seat = Seat(node_id)
    reset_protocol(step, seat)
    conv = conversation(step, seat)
    conv = update_conversation(step, seat, retries=min(conv.retries + 1, MAX_MODEL_ATTEMPT))
    update_conversation(
        step, seat, announced_attempt=min(conv.announced_attempt, conv.model_attempt - 1)
    )
    if message or attachments:
        text = message or ""
        append(step, Seat(node_id), UserItem(content=text, attachments=attachments))
        step.emit(ChatMessage(node_id=node_id, role="user", content=text, attachments=attachments))


def set_budget(step: Step, fact: BudgetSet) -> None:
    """Take a person's budget; the nodes it held go on at once when the run may call again."""
    s = step.s
    s.budget = raised(s, fact)
    if reached(s) is not None:
        return
    for node_id, ns in sorted(s.nodes.items()):
        if node_id not in step.by_id or not held(ns):
            continue
        retry(step, node_id, None)
        if ns.child is not None:
            # Its subagent calls next: the node shows as running again meanwhile.
            announce_attempt(step, Seat(node_id), step.label(node_id))


def check(snapshot: RunSnapshot, action: Any) -> str | None:
    """Why a human action matches nothing pending, or None when it applies (the `act` validator)."""
    if snapshot.finished:
        return f"the run is {snapshot.status}; resume it first"
    if snapshot.limits:
        too_long = _text_over_limit(action)
        if too_long is not None:
            return too_long
    nodes = snapshot.nodes
    if isinstance(action, ApprovalDecided):
        batch = snapshot.batches.get(action.approval_id)
        if batch is None or not batch.requires_approval:
            return f"no pending approval {action.approval_id!r}"
        return decision_problem(Step(snapshot, 0), action)
    if isinstance(action, GrantRevoked):
        return revoke_problem(snapshot, action)
    if isinstance(action, RevertRequested):
        if batch_node(snapshot, action.batch_id) is None:
            return f"no edit batch {action.batch_id!r} to revert (see the run's editBatches)"
        return None
    if isinstance(action, InterruptRequested):
        return interrupt_problem(snapshot, action.node_id)
    if isinstance(action, BudgetSet):
        return check_budget(action)
    if not isinstance(action, InputGiven | RetryRequested | MessageSent):
        return (
            "unknown action: expected input, approval, revoke_grant, retry, message, interrupt, "
            "revert or budget"
        )
    node = snapshot.workflow.find_node(action.node_id)
    if action.node_id not in nodes or node is None:
        return f"unknown node {action.node_id!r}"
    ns = nodes[action.node_id]
    if isinstance(action, InputGiven):
        if ns.awaiting or (action.retry_failed and (ns.failed is not None or ns.interrupted)):
            return None
        waiting = sorted(n for n, s in nodes.items() if s.awaiting)
        if waiting:
            return (
                f"node {action.node_id!r} is not waiting for input (waiting: {', '.join(waiting)})"
            )
        return "no node is waiting for input"
    if isinstance(action, RetryRequested):
        if ns.failed is None and not ns.interrupted:
            return f"node {action.node_id!r} is not failed or interrupted, so it cannot be retried"
        return None
    if ns.awaiting or ns.failed is not None or ns.interrupted:
        return None
    source = snapshot.planning and action.node_id == snapshot.plan_source
    if not (node.agent.request_user_input or node.agent.conversation_mode or source):
        return f"live messages are disabled for node {action.node_id!r} (requestUserInput is off)"
    live = (
        ns.conversation.in_flight is not None
        or ns.child is not None
        or any(b.node_id == action.node_id for b in snapshot.batches.values())
    )
    if not live:
        return f"node {action.node_id!r} is not active"
    return None


def batch_node(snapshot: RunSnapshot, batch_id: str) -> str | None:
    """The node whose changed files an edit batch made (still unreverted), or None."""
    for node_id, ns in sorted(snapshot.nodes.items()):
        if any(r.get("batch_id") == batch_id for r in ns.changed_files):
            return node_id
    return None


def on_batch_reverted(step: Step, fact: BatchReverted) -> None:
    """An edit batch was undone (its file records go), or refused (the trace says why)."""
    node_id = batch_node(step.s, fact.batch_id)
    if node_id is None:
        return
    if fact.error is None:
        kept = [r for r in step.node(node_id).changed_files if r.get("batch_id") != fact.batch_id]
        step.update_node(node_id, changed_files=kept)
    step.emit(
        EditBatchReverted(
            node_id=node_id,
            label=step.label(node_id),
            batch_id=fact.batch_id,
            paths=fact.paths,
            error=fact.error,
        )
    )


def _text_over_limit(action: Any) -> str | None:
    """Why a person's text is too long for the run to take, or None."""
    texts: list[tuple[str | None, str]] = []
    if isinstance(action, InputGiven):
        texts = [(action.text, "the answer")]
    elif isinstance(action, MessageSent):
        texts = [(action.text, "the message")]
    elif isinstance(action, RetryRequested):
        texts = [(action.message, "the retry message")]
    elif isinstance(action, ApprovalDecided):
        texts = [(action.reason, "the reason")]
        texts += [(d.reason, f"the reason of call {d.call_id!r}") for d in action.decisions]
    for text, what in texts:
        problem = text_limit_problem(MAX_MESSAGE_BYTES, text, what, "send a shorter text")
        if problem is not None:
            return problem
    return None


def _ignored_record(fact: Action) -> Any:
    """An action refused for a text over the limit, as its ignored-action event records it."""
    record = fact.model_dump(mode="json")
    for key, value in record.items():
        if isinstance(value, str) and len(value) > IGNORED_TEXT_CHARS:
            record[key] = value[:IGNORED_TEXT_CHARS] + "…"
    return record


def announce_pauses(step: Step) -> None:
    """After a resume, say again what still waits for people, so every follower sees it."""
    for node_id, ns in sorted(step.s.nodes.items()):
        if ns.awaiting and node_id in step.by_id:
            pause_for_input(step, node_id, ns.structured_input)
        elif ns.failed is not None and node_id in step.by_id:
            step.emit(
                NodeErrored(
                    node_id=node_id,
                    label=step.label(node_id),
                    error=ns.failed,
                    model_attempt=ns.model_attempt,
                )
            )
    for batch_id in sorted(step.s.batches):
        if step.s.batches[batch_id].requires_approval:
            announce_approval(step, batch_id)


__all__ = [
    "IGNORED_TEXT_CHARS",
    "announce_pauses",
    "batch_node",
    "check",
    "on_action",
    "on_fact",
    "retry",
    "set_budget",
]
