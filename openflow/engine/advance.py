"""The reducer: `advance(snapshot, facts, now_ms) -> Plan`.

Pure and total: the same snapshot, facts and time give the same plan, and run-time conditions
never raise; they become node states and events. Sets are sorted by node id before they reach
a plan. The per-node turn protocol lives in `turn`; this module schedules nodes, folds in
tool results and people's actions, and ends runs.

Unlike OpenFlow, a node starts as soon as its own parents have outputs (the layer barrier of
spec 2.2 only with `strictLayers`), and pauses resolve one by one instead of as a barrier.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, assert_never

from openflow.engine import prompts, review
from openflow.engine.classify import classify_failure, classify_reply
from openflow.engine.events import (
    Aborted,
    ActionIgnored,
    ChatMessage,
    Error,
    Finished,
    NodeErrored,
    NodeFailed,
    NodeQueued,
    NodeRetrying,
    NodeStarted,
    RunResumed,
    RunStarted,
    ToolApproved,
    ToolDenied,
    ToolOutcomeUnknown,
    ToolStarted,
)
from openflow.engine.graph import workflow_problems
from openflow.engine.limits import MAX_ENTRYPOINT_BYTES, MAX_MESSAGE_BYTES, text_limit_problem
from openflow.engine.policy import EAGER_TOOLS, SEAL_TOOL, approval_decision
from openflow.engine.request import ModelReply
from openflow.engine.spec import CallableAgent, Workflow
from openflow.engine.state import (
    ActionMalformed,
    ApprovalDecided,
    Awaiting,
    CallModel,
    CancelRequested,
    CancelWork,
    CatalogFrozen,
    Fact,
    HandoffStored,
    InFlightCall,
    InputGiven,
    MessageSent,
    ModelFailed,
    ModelReplied,
    NodeState,
    PendingBatch,
    Plan,
    ReadReceipt,
    ReceiptRead,
    RetryRequested,
    RunSnapshot,
    RunStatus,
    RunTools,
    SubagentRecord,
    TimerFired,
    ToolsFinished,
    ToolsLost,
    ToolsOutcomeUnknown,
    TranscriptDelta,
    WriteHandoff,
    stored_reply,
    stored_result,
)
from openflow.engine.subagents import Subagents, snapshot_agents
from openflow.engine.transcript import UserItem
from openflow.engine.turn import (
    MAX_MODEL_ATTEMPT,
    backoff_delay_ms,
    error_text,
    jitter_ms,
    reply_items,
    shown_call,
    structured_problem,
)

Action = InputGiven | ApprovalDecided | RetryRequested | MessageSent

#: How much of an over-long text an ignored-action event keeps.
_IGNORED_TEXT_CHARS = 1024


class _Run(Subagents):
    """The working copy plus scheduling, tool results, people's actions and run endings."""

    _depths: dict[str, int] | None = None

    # --- dispatch -----------------------------------------------------------------------

    def depths(self) -> dict[str, int]:
        """Each node's execution layer (Kahn by depth, spec 2.2); nodes on a cycle get none."""
        if self._depths is None:
            depths: dict[str, int] = {}
            pending = sorted(self.by_id)
            while pending:
                placed = [n for n in pending if all(p in depths for p in self.parents_of(n))]
                if not placed:
                    break
                for n in placed:
                    depths[n] = 1 + max((depths[p] for p in self.parents_of(n)), default=-1)
                pending = [n for n in pending if n not in depths]
            self._depths = depths
        return self._depths

    def ready(self, node_id: str) -> bool:
        if not all(
            self.s.nodes[p].has_output for p in self.parents_of(node_id) if p in self.s.nodes
        ):
            return False
        if not self.wf.settings.strict_layers:
            return True
        depths = self.depths()
        mine = depths.get(node_id)
        if mine is None:
            return False
        return all(ns.has_output for n, ns in self.s.nodes.items() if depths.get(n, mine) < mine)

    def blocked(self, node_id: str) -> bool:
        ns = self.s.nodes[node_id]
        return (
            ns.has_output
            or ns.awaiting
            or ns.in_flight is not None
            or ns.handoff_job is not None
            or ns.interrupted
            or ns.failed is not None
            or ns.backoff_until_ms is not None
            or ns.child is not None
            or bool(self.node_batches(node_id))
        )

    def dispatch_model(self, node_id: str) -> None:
        ns = self.node(node_id)
        for text in ns.queued_messages:
            self.append(node_id, UserItem(content=text))
        ns.queued_messages = []
        request = self.build_request(node_id)
        if request is None:
            return
        attempt = ns.model_attempt
        if ns.announced_attempt < attempt:
            ns.announced_attempt = attempt
            label = self.label(node_id)
            self.emit(NodeQueued(node_id=node_id, label=label, model_attempt=attempt))
            self.emit(NodeStarted(node_id=node_id, label=label, model_attempt=attempt))
        self.announce_subagents(node_id)
        ns.turn_seq += 1
        call_id = self.new_id(f"model:{node_id}")
        ns.in_flight = InFlightCall(call_id=call_id, model_attempt=attempt)
        self.intents.append(
            CallModel(
                call_id=call_id,
                node_id=node_id,
                model_attempt=attempt,
                request=request,
                delta=self.delta(node_id),
            )
        )

    def dispatch_batch(self, batch: PendingBatch) -> None:
        if self.runtime_batch(batch):
            segment = self.step_runtime_batch(batch)
            if segment is None:
                return
            batch = segment
        batch.in_flight = True
        child = self.s.nodes[batch.node_id].child if batch.subagent_id is not None else None
        worker = batch.subagent_id or batch.node_id
        attempt = child.model_attempt if child is not None else None
        for call in batch.calls:
            self.emit(
                ToolStarted(
                    node_id=worker,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    arguments=shown_call(call)["arguments"],
                )
            )
        self.intents.append(
            RunTools(
                batch_id=batch.batch_id,
                node_id=worker,
                calls=tuple(batch.calls),
                side_effects=batch.side_effects,
                model_attempt=attempt or self.node(batch.node_id).model_attempt,
            )
        )

    def schedule(self) -> None:
        if self.s.finished:
            return
        if self.s.cancel_requested:
            if self.s.review_call is not None:
                # Every node is done: stopping only ends the review; the run still succeeded.
                self.intents.append(CancelWork(ids=(self.s.review_call,)))
                self.end_review([], review.CANCELLED)
                self.complete()
                return
            self.stop()
            return
        if self.s.terminal_error is not None:
            self.fail_run()
            return
        for batch_id in sorted(self.s.batches):
            batch = self.s.batches.get(batch_id)
            if batch is None or batch.in_flight or batch.requires_approval:
                continue
            if not self.batch_waits(batch):
                self.dispatch_batch(batch)
        nodes = self.s.nodes
        for node_id in sorted(nodes):
            child_ready = nodes[node_id].child is not None and node_id in self.by_id
            if child_ready and not self.child_blocked(node_id):
                self.dispatch_child(node_id)
        for node_id in sorted(nodes):
            ns = nodes[node_id]
            if ns.has_output or node_id not in self.by_id:
                continue
            # Cheapest first: a node with a parent still at work cannot start.
            if not all(nodes[p].has_output for p in self.parents_of(node_id) if p in nodes):
                continue
            if not self.blocked(node_id) and self.ready(node_id):
                self.dispatch_model(node_id)
                if self.s.terminal_error is not None:
                    self.fail_run()
                    return
        if self.busy():
            self.s.status = "running"
            return
        if all(ns.has_output for ns in self.s.nodes.values()):
            if self.s.review_enabled and not self.s.review_done:
                self.start_review()
                if self.s.review_call is not None:
                    self.s.status = "running"
                    return
            self.complete()
            return
        if self.awaiting().any:
            self.s.status = "paused"
            return
        stuck = sorted(n for n, ns in self.s.nodes.items() if not ns.has_output)
        first = stuck[0] if stuck else ""
        self.terminal(first, f"no runnable nodes: {', '.join(stuck)} cannot start")
        self.fail_run()

    def busy(self) -> bool:
        return (
            self.s.review_call is not None
            or any(
                ns.in_flight is not None
                or ns.handoff_job is not None
                or ns.backoff_until_ms is not None
                or ns.child is not None
                for ns in self.s.nodes.values()
            )
            or any(b.in_flight for b in self.s.batches.values())
        )

    def awaiting(self) -> Awaiting:
        nodes = sorted(self.s.nodes.items())
        return Awaiting(
            inputs=tuple(n for n, ns in nodes if ns.awaiting),
            approvals=tuple(
                sorted(b.batch_id for b in self.s.batches.values() if b.requires_approval)
            ),
            retryables=tuple(n for n, ns in nodes if ns.failed is not None or ns.interrupted),
        )

    # --- run endings --------------------------------------------------------------------

    # --- the post-run review (spec 12) --------------------------------------------------

    def start_review(self) -> None:
        """Ask the last node's model for suggestions before the run finishes."""
        reviewer = review.reviewer_node(self.s)
        if reviewer is None:
            self.end_review([], review.NO_REVIEWER)
            return
        request = review.review_request(self.s, reviewer)
        call_id = self.new_id(f"model:{review.REVIEW_NODE}")
        self.s.review_call = call_id
        self.intents.append(
            CallModel(
                call_id=call_id,
                node_id=review.REVIEW_NODE,
                model_attempt=1,
                request=request,
                delta=TranscriptDelta(base_len=0),
                purpose="review",
            )
        )

    def on_review_reply(self, reply: ModelReply) -> None:
        self.report_usage(review.REVIEW_NODE, reply)  # spent like any call
        outcome = classify_reply(reply, review.SUGGESTIONS_SCHEMA).outcome
        self.end_review(*review.parse_suggestions(outcome, set(self.by_id)))

    def end_review(self, suggestions: list[dict[str, Any]], error: str | None) -> None:
        self.s.review_call = None
        self.s.review_done = True
        self.s.suggestions = suggestions
        self.s.suggestions_error = error

    def complete(self) -> None:
        outputs = [{"node_id": n, "output": ns.output} for n, ns in sorted(self.s.nodes.items())]
        report = {
            "workflow_id": self.wf.id,
            "outputs": outputs,
            "read_calls": self.s.read_calls,
            "redundant_reads": self.s.redundant_reads,
            "tokens_in": self.s.tokens_in,
            "tokens_out": self.s.tokens_out,
            "estimated_cost_usd": self.s.cost_usd,
            "suggestions": list(self.s.suggestions),
            "suggestions_error": self.s.suggestions_error,
        }
        self.s.report = report
        self.s.finished = True
        self.s.status = "completed"
        self.emit(Finished(report=report))

    def fail_run(self) -> None:
        node_id = self.s.terminal_node or ""
        self.s.finished = True
        self.s.status = "failed"
        ids = [ns.in_flight.call_id for ns in self.s.nodes.values() if ns.in_flight is not None]
        for node_id_ in sorted(self.s.nodes):
            if self.s.nodes[node_id_].child is not None:
                ids += self.abort_child(node_id_)
        for node_id_ in list(self.s.nodes):
            ns = self.node(node_id_)
            ns.in_flight = None
            ns.pending_repair = None
            ns.backoff_until_ms = None
        ids += [b.batch_id for b in self.s.batches.values() if b.in_flight]
        if ids:
            self.intents.append(CancelWork(ids=tuple(sorted(ids))))
        self.emit(
            NodeFailed(
                node_id=node_id,
                label=self.label(node_id),
                error=self.s.terminal_error or "run failed",
            )
        )

    def stop(self) -> None:
        ids: list[str] = []
        for node_id in sorted(self.s.nodes):
            ns = self.node(node_id)
            if ns.child is not None:
                ids += self.abort_child(node_id)
                ns.interrupted = True
            if ns.in_flight is not None:
                ids.append(ns.in_flight.call_id)
                ns.in_flight = None
                ns.pending_repair = None
                ns.interrupted = True
            ns.backoff_until_ms = None
            if ns.handoff_job is not None:
                ns.handoff_job = None
                ns.interrupted = True
        for batch_id, batch in sorted(self.s.batches.items()):
            if batch.in_flight:
                ids.append(batch_id)
                self.s.batches.pop(batch_id)
                self.node(batch.node_id).interrupted = True
                self.close_dangling(batch.node_id, prompts.INTERRUPTED_RESULT)
        if ids:
            self.intents.append(CancelWork(ids=tuple(sorted(ids))))
        self.s.finished = True
        self.s.status = "stopped"
        self.emit(Aborted())

    # --- facts --------------------------------------------------------------------------

    def on_fact(self, fact: Fact) -> None:
        if self.s.finished and not isinstance(fact, CancelRequested):
            return
        if isinstance(fact, ModelReplied):
            self.on_model_replied(fact)
        elif isinstance(fact, ModelFailed):
            self.on_model_failed(fact)
        elif isinstance(fact, ToolsFinished):
            self.on_tools_finished(fact)
        elif isinstance(fact, ToolsOutcomeUnknown):
            self.on_tools_unknown(fact)
        elif isinstance(fact, ToolsLost):
            self.on_tools_lost(fact)
        elif isinstance(fact, ReceiptRead):
            self.on_receipt_read(fact)
        elif isinstance(fact, HandoffStored):
            self.on_handoff(fact)
        elif isinstance(fact, InputGiven | ApprovalDecided | RetryRequested | MessageSent):
            reason = check(self.s, fact)
            if reason is not None:
                too_long = self.s.limits and _text_over_limit(fact) is not None
                action = _ignored_record(fact) if too_long else fact.model_dump(mode="json")
                self.emit(ActionIgnored(action=action, reason=reason))
            else:
                self.on_action(fact)
        elif isinstance(fact, ActionMalformed):
            action = {"kind": fact.action, "payload": fact.payload}
            self.emit(ActionIgnored(action=action, reason=fact.reason, signal=fact.signal))
        elif isinstance(fact, TimerFired):
            if self.child_timer_fired(fact.node_id):
                return
            if fact.node_id in self.s.nodes:
                self.node(fact.node_id).backoff_until_ms = None
        elif isinstance(fact, CancelRequested):
            if not self.s.finished:
                self.s.cancel_requested = True
        elif isinstance(fact, CatalogFrozen):
            if self.s.tool_names is None:
                self.s.tool_names = sorted(fact.tool_names)
        else:
            assert_never(fact)

    def take_call(self, call_id: str) -> tuple[str, NodeState, InFlightCall] | None:
        """The node whose in-flight call this is, with the call; None for a stale fact."""
        for node_id, seen in sorted(self.s.nodes.items()):
            call = seen.in_flight
            if call is not None and call.call_id == call_id and node_id in self.by_id:
                ns = self.node(node_id)
                ns.in_flight = None
                return node_id, ns, call
        return None

    def on_model_replied(self, fact: ModelReplied) -> None:
        if fact.call_id == self.s.review_call:
            self.time_model(fact.node_id, fact.ms)
            self.on_review_reply(fact.reply)
            return
        parent = self.take_child_call(fact.call_id)
        if parent is not None:
            self.time_model(parent, fact.ms)
            self.on_child_replied(parent, fact)
            return
        taken = self.take_call(fact.call_id)
        if taken is None:
            return
        node_id, ns, call = taken
        self.time_model(node_id, fact.ms)
        if call.kind != "node":
            self.on_repair_reply(node_id, fact.reply)
            return
        if fact.persisted_len is not None:
            ns.persisted_len = fact.persisted_len
        ns.calls_done += 1
        self.on_reply(node_id, fact.reply, stored_reply(fact))

    def on_model_failed(self, fact: ModelFailed) -> None:
        if fact.call_id == self.s.review_call:
            self.time_model(fact.node_id, fact.ms)
            # No retries: the review is advice, and the run has already succeeded.
            self.end_review([], f"Reviewer request failed: {fact.failure.message}")
            return
        parent = self.take_child_call(fact.call_id)
        if parent is not None:
            self.time_model(parent, fact.ms)
            self.on_child_failed(parent, fact)
            return
        taken = self.take_call(fact.call_id)
        if taken is None:
            return
        node_id, ns, call = taken
        self.time_model(node_id, fact.ms)
        if call.kind != "node":
            self.on_repair_failure(node_id, fact.failure)
            return
        if fact.persisted_len is not None:
            ns.persisted_len = fact.persisted_len
        if fact.refs_missing:
            # The run store lost what the references point at (its blobs are not synced to
            # disk): the next call sends the items themselves. Not the model's failure.
            ns.inline_next = True
            return
        if fact.lost:
            self.on_lost_call(node_id, fact)
            return
        ns.calls_done += 1
        self.on_failure(node_id, fact.failure)

    def announce_pauses(self) -> None:
        """After a resume, say again what still waits for people, so every follower sees it."""
        for node_id, ns in sorted(self.s.nodes.items()):
            if ns.awaiting and node_id in self.by_id:
                self.pause_for_input(node_id, ns.structured_input)
            elif ns.failed is not None and node_id in self.by_id:
                self.emit(
                    NodeErrored(
                        node_id=node_id,
                        label=self.label(node_id),
                        error=ns.failed,
                        model_attempt=ns.model_attempt,
                    )
                )
        for batch_id in sorted(self.s.batches):
            if self.s.batches[batch_id].requires_approval:
                self.announce_approval(batch_id)

    def on_lost_call(self, node_id: str, fact: ModelFailed) -> None:
        """A call whose worker died: try again at once (the provider did not fail).

        It counts as a new attempt and against the transient streak, so a worker that keeps
        dying on the same call ends in a retryable pause instead of a loop.
        """
        ns = self.node(node_id)
        display = error_text(classify_failure(fact.failure))
        if ns.transient_streak >= self.wf.settings.retry_policy.max_attempts:
            self.fail_node(node_id, display)
            return
        ns.transient_streak += 1
        ns.retries = min(ns.retries + 1, MAX_MODEL_ATTEMPT)
        self.emit(
            NodeRetrying(
                node_id=node_id,
                label=self.label(node_id),
                attempt=ns.model_attempt,
                backoff_ms=0,
                error=display,
            )
        )

    def on_handoff(self, fact: HandoffStored) -> None:
        if fact.node_id not in self.s.nodes or fact.node_id not in self.by_id:
            return
        ns = self.node(fact.node_id)
        job = ns.handoff_job
        if job is None:
            return
        ns.handoff_job = None
        if fact.error is not None or fact.manifest is None:
            self.fail_node(
                fact.node_id, f"permanent: node handoff could not be stored: {fact.error}"
            )
            return
        output = job.get("output")
        if fact.manifest.get("format") == "markdown":
            message = str(job.get("message") or "").strip()
            output = {"summary": message or "See the Markdown handoff artifact."}
        self.store_output(fact.node_id, output, fact.manifest)

    def on_tools_finished(self, fact: ToolsFinished) -> None:
        batch = self.s.batches.get(fact.batch_id)
        if batch is None or not batch.in_flight:
            return
        self.s.batches.pop(fact.batch_id)
        if batch.subagent_id is not None:
            self.on_child_tools(batch, fact)
            return
        node_id = batch.node_id
        ns = self.node(node_id)
        for event in fact.events:
            self.emit_reported(node_id, event)
        by_id = {r.tool_call_id: (i, r) for i, r in enumerate(fact.results)}
        for call in batch.calls:
            found = by_id.pop(call.id, None)
            if found is None:
                continue
            index, result = found
            self.time_tool(node_id, call.name, fact.ms, index)
            origin = stored_result(fact, index)
            self.add_result(
                node_id,
                call,
                result.content,
                result.is_error,
                origin=origin,
                artifact_ids=result.artifact_ids,
                output_meta=result.output_meta,
            )
            if call.name == SEAL_TOOL and not result.is_error and result.artifact_ids:
                self.record_seal(node_id, call, result.artifact_ids)
            if call.name == "read" and not result.is_error:
                self.count_read(node_id, str(call.arguments.get("path", "")))
        ns.changed_files.extend(dict(r) for r in fact.changed_files)
        ns.reads.extend(dict(r) for r in fact.reads)
        if fact.interrupted:
            self.interrupt(node_id)
        else:
            self.close_dangling(node_id, prompts.INTERRUPTED_RESULT)

    def count_read(self, node_id: str, path: str) -> None:
        self.s.read_calls += 1
        for anc in self.ancestors_of(node_id):
            an = self.s.nodes.get(anc)
            if an is not None and any(r.get("path") == path for r in an.reads):
                self.s.redundant_reads += 1
                return

    def on_tools_lost(self, fact: ToolsLost) -> None:
        """A batch whose completion was lost is looked up, never sent again: a side-effecting
        batch leaves a receipt of its results before it reports, so one that ran is settled
        with its real results, and one that left none as outcome unknown."""
        batch = self.s.batches.get(fact.batch_id)
        if batch is None or not batch.in_flight or batch.lost:
            return
        batch.lost = True
        self.intents.append(ReadReceipt(batch_id=batch.batch_id, node_id=batch.node_id))

    def on_receipt_read(self, fact: ReceiptRead) -> None:
        batch = self.s.batches.get(fact.batch_id)
        if batch is None or not batch.lost:
            return
        if fact.finished is not None and fact.finished.batch_id == fact.batch_id:
            self.on_tools_finished(fact.finished)
        else:
            self.on_tools_unknown(ToolsOutcomeUnknown(batch_id=fact.batch_id, reason=fact.reason))

    def on_tools_unknown(self, fact: ToolsOutcomeUnknown) -> None:
        batch = self.s.batches.get(fact.batch_id)
        if batch is None or not batch.in_flight:
            return
        self.s.batches.pop(fact.batch_id)
        if batch.subagent_id is not None:
            self.on_child_tools_unknown(batch)
            return
        for call in batch.calls:
            self.emit(
                ToolOutcomeUnknown(node_id=batch.node_id, tool_call_id=call.id, tool_name=call.name)
            )
        self.close_dangling(batch.node_id, prompts.UNKNOWN_OUTCOME_RESULT)

    def on_action(self, fact: Action) -> None:
        if isinstance(fact, InputGiven):
            self.give_input(fact.node_id, fact.text)
        elif isinstance(fact, ApprovalDecided):
            self.decide(fact)
        elif isinstance(fact, RetryRequested):
            self.retry(fact.node_id, fact.message)
        elif isinstance(fact, MessageSent):
            ns = self.node(fact.node_id)
            if ns.awaiting:
                self.give_input(fact.node_id, fact.text)
            elif ns.failed is not None or ns.interrupted:
                self.retry(fact.node_id, fact.text)
            else:
                ns.queued_messages.append(fact.text)
                self.emit(ChatMessage(node_id=fact.node_id, role="user", content=fact.text))
        else:
            assert_never(fact)

    def decide(self, fact: ApprovalDecided) -> None:
        batch = self.s.batches[fact.approval_id]
        if fact.allow:
            batch.requires_approval = False
            for call in batch.calls:
                self.emit(
                    ToolApproved(
                        approval_id=batch.batch_id,
                        node_id=batch.node_id,
                        tool_call_id=call.id,
                        tool_name=call.name,
                    )
                )
            return
        self.s.batches.pop(batch.batch_id)
        text = prompts.denial_result(fact.reason)
        for call in batch.calls:
            self.emit(
                ToolDenied(
                    approval_id=batch.batch_id,
                    node_id=batch.node_id,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    reason=fact.reason or "Tool call denied by the user.",
                )
            )
            self.add_result(batch.node_id, call, text, is_error=True)

    def give_input(self, node_id: str, text: str) -> None:
        ns = self.node(node_id)
        ns.awaiting = False
        ns.structured_input = None
        self.append(node_id, UserItem(content=text))
        self.emit(ChatMessage(node_id=node_id, role="user", content=text))

    def retry(self, node_id: str, message: str | None) -> None:
        ns = self.node(node_id)
        ns.failed = None
        ns.interrupted = False
        ns.pending_repair = None
        self.reset_protocol(ns)
        ns.retries = min(ns.retries + 1, MAX_MODEL_ATTEMPT)
        ns.announced_attempt = min(ns.announced_attempt, ns.model_attempt - 1)
        if message:
            self.append(node_id, UserItem(content=message))
            self.emit(ChatMessage(node_id=node_id, role="user", content=message))


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
        return None
    if not isinstance(action, InputGiven | RetryRequested | MessageSent):
        return "unknown action: expected input, approval, retry or message"
    node = snapshot.workflow.find_node(action.node_id)
    if action.node_id not in nodes or node is None:
        return f"unknown node {action.node_id!r}"
    ns = nodes[action.node_id]
    if isinstance(action, InputGiven):
        if ns.awaiting:
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
        ns.in_flight is not None
        or ns.child is not None
        or any(b.node_id == action.node_id for b in snapshot.batches.values())
    )
    if not live:
        return f"node {action.node_id!r} is not active"
    return None


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
    for text, what in texts:
        problem = text_limit_problem(MAX_MESSAGE_BYTES, text, what, "send a shorter text")
        if problem is not None:
            return problem
    return None


def _ignored_record(fact: InputGiven | ApprovalDecided | RetryRequested | MessageSent) -> Any:
    """An action refused for a text over the limit, as its ignored-action event records it."""
    record = fact.model_dump(mode="json")
    for key, value in record.items():
        if isinstance(value, str) and len(value) > _IGNORED_TEXT_CHARS:
            record[key] = value[:_IGNORED_TEXT_CHARS] + "…"
    return record


def _finish(run: _Run) -> Plan:
    status: RunStatus = run.s.status
    return Plan(
        snapshot=run.s,
        events=tuple(run.events),
        intents=tuple(run.intents),
        awaiting=run.awaiting(),
        done=run.s.finished,
        status=status,
    )


def start(
    workflow: Workflow,
    run_id: str,
    now_ms: int,
    entrypoint_text: str = "",
    execution_dir: str = "",
    project_root: str | None = None,
    tool_names: Iterable[str] | None = None,
    warnings: Iterable[str] = (),
    start_error: str | None = None,
    agents: Iterable[CallableAgent] = (),
    review: bool = True,
    read_tools: Iterable[str] = (),
    limits: bool = True,
) -> Plan:
    """A new run's first plan: the initial snapshot and its first model calls.

    An invalid workflow ends the run at once with every problem named; `warnings` (servers
    skipped at start and the like) become non-fatal `Error` events. `agents` are the saved
    agents (`agents.json`); the run keeps the ones its nodes may call (spec 6). `review`: a
    post-run review call ends a successful run (spec 12). `limits`: the run enforces
    `engine.limits` (an entrypoint or workflow over one ends it at once, too-long texts from
    people are refused).
    """
    kept = snapshot_agents(workflow, list(agents))
    plan_mode = workflow.settings.plan_mode
    source = plan_mode.evidence_source_node_id if plan_mode is not None else None
    snapshot = RunSnapshot(
        run_id=run_id,
        workflow=workflow,
        entrypoint_text=entrypoint_text,
        execution_dir=execution_dir,
        project_root=project_root,
        tool_names=sorted(tool_names) if tool_names is not None else None,
        nodes={n.id: NodeState() for n in sorted(workflow.nodes, key=lambda n: n.id)},
        plan_source=source if source is not None and workflow.find_node(source) else None,
        agents=kept,
        subagents={a.id: SubagentRecord(id=a.id, name=a.name, purpose=a.purpose) for a in kept},
        review_enabled=review,
        read_tools=sorted(set(read_tools)),
        limits=limits,
    )
    run = _Run(snapshot, now_ms)
    too_long = text_limit_problem(
        MAX_ENTRYPOINT_BYTES, entrypoint_text, "the entrypoint", "start it with a shorter text"
    )
    shown = entrypoint_text
    if limits and too_long is not None:
        shown = entrypoint_text[:_IGNORED_TEXT_CHARS] + "…"
    run.emit(
        RunStarted(workflow_id=workflow.id, workflow_name=workflow.name, entrypoint_text=shown)
    )
    for warning in warnings:
        text = warning if warning.startswith("ignored ") else f"ignored {warning}"
        run.emit(Error(message=text))
    problems = workflow_problems(workflow, limits=limits)
    if start_error is not None:
        run.terminal("", f"the run could not start: {start_error}")
    elif limits and too_long is not None:
        run.terminal("", f"the run could not start: {too_long}")
    elif problems:
        first = problems[0]
        run.terminal(
            first.node_id or "",
            "invalid workflow: " + "; ".join(str(p) for p in problems),
        )
    run.schedule()
    return _finish(run)


def eager_tools(snapshot: RunSnapshot, node_id: str, offered: Iterable[str]) -> tuple[str, ...]:
    """The read-tier tools a node's model turn may run as soon as the model asks for them.

    The shell may then feed their results for the batch the engine plans from that reply, if the
    engine plans exactly those calls in the same step; otherwise the results are dropped and the
    batch runs as usual. Empty when the node's approval mode would ask before a read.
    """
    node = snapshot.workflow.find_node(node_id)
    ns = snapshot.nodes.get(node_id)
    if node is None or ns is None:
        return ()
    patched = ns.runtime_patch.get("approval_mode")
    mode = patched if isinstance(patched, str) else str(node.agent.tools.approval_mode or "write")
    if approval_decision(mode, "read") != "allow":
        return ()
    return tuple(sorted(set(offered) & EAGER_TOOLS))


def advance(snapshot: RunSnapshot, facts: Sequence[Fact], now_ms: int) -> Plan:
    """Fold facts into the run and plan what comes next."""
    run = _Run(snapshot, now_ms)
    for fact in facts:
        run.on_fact(fact)
    run.schedule()
    return _finish(run)


def resume(snapshot: RunSnapshot, now_ms: int) -> Plan:
    """Continue a stopped, paused or failed run: interrupted nodes are retried at once.

    Work that was in flight when the snapshot was taken is settled first: model calls are
    retried, read-only tool batches are sent again, and side-effecting batches are settled as
    outcome unknown (never re-sent). A running subagent is ended as interrupted (its parent's
    call gets the interrupted result) and the parent is retried; it may call the subagent
    again, from scratch. A frozen change evidence packet that no longer matches its
    hash or its pinned source fails the run instead of feeding later nodes.
    """
    run = _Run(snapshot, now_ms)
    previous = run.s.status
    run.s.finished = False
    run.s.cancel_requested = False
    run.s.terminal_error = None
    run.s.terminal_node = None
    run.s.status = "running"
    run.emit(RunResumed(from_status=previous))
    # A review cut off by the checkpoint is asked again.
    run.s.review_call = None
    packet = run.s.packet
    problem = packet.problem(run.s.plan_source) if packet is not None else None
    if problem is not None:
        run.terminal(run.s.plan_source or "", f"cannot resume: {problem}")
    for node_id in sorted(run.s.nodes):
        if run.s.nodes[node_id].child is not None and node_id in run.by_id:
            run.abort_child(node_id)
            run.node(node_id).interrupted = True
    for batch_id, batch in sorted(run.s.batches.items()):
        if batch.in_flight and batch.side_effects:
            run.on_tools_unknown(ToolsOutcomeUnknown(batch_id=batch_id))
        elif batch.in_flight:
            batch.in_flight = False
    for node_id in sorted(run.s.nodes):
        ns = run.node(node_id)
        ns.backoff_until_ms = None
        ns.pending_repair = None
        if ns.in_flight is not None:
            ns.in_flight = None
            ns.interrupted = True
        node = run.by_id.get(node_id)
        if ns.handoff_job is not None and node is not None:
            fmt = node.agent.handoff.format
            if fmt in ("json", "markdown"):
                run.intents.append(
                    WriteHandoff(node_id=node_id, format=fmt, output=ns.handoff_job.get("output"))
                )
            else:
                ns.handoff_job = None
                ns.interrupted = True
        if ns.interrupted:
            run.retry(node_id, None)
    run.announce_pauses()
    run.schedule()
    return _finish(run)


__all__ = [
    "advance",
    "backoff_delay_ms",
    "check",
    "eager_tools",
    "error_text",
    "jitter_ms",
    "reply_items",
    "resume",
    "start",
    "structured_problem",
]
