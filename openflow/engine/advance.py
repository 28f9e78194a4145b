"""The reducer: `advance(snapshot, facts, now_ms) -> Plan`.

Pure and total: the same snapshot, facts and time give the same plan, and run-time conditions
never raise; they become node states and events. Sets are sorted by node id before they reach
a plan. A step (`step.Step`) folds the facts in (`facts.on_fact`, the one fact dispatch), then
plans what comes next (`schedule.schedule`); the turn machine it drives is `conversation`
(shared by nodes and subagents), `turn` (a node's policy) and `subagents`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from openflow.engine.budget import run_budget
from openflow.engine.build import snapshot_agents
from openflow.engine.conversation import Seat, update_conversation
from openflow.engine.copies import trusted
from openflow.engine.errors import WorkflowValidationError
from openflow.engine.events import ActionIgnored, ChatMessage, Error, RunResumed, RunStarted
from openflow.engine.facts import (
    IGNORED_TEXT_CHARS,
    announce_pauses,
    check,
    give_input,
    on_fact,
    on_tools_unknown,
    retry,
)
from openflow.engine.graph import workflow_problems
from openflow.engine.lifecycle import abort_child
from openflow.engine.limits import MAX_ENTRYPOINT_BYTES, MAX_MESSAGE_BYTES, text_limit_problem
from openflow.engine.policy import EAGER_TOOLS, approval_decision
from openflow.engine.protocol import (
    backoff_delay_ms,
    error_text,
    jitter_ms,
    reply_items,
    structured_problem,
)
from openflow.engine.schedule import awaiting, schedule
from openflow.engine.spec import Budget, CallableAgent, Workflow
from openflow.engine.state import (
    Continuation,
    Fact,
    Intent,
    Interrupted,
    ModelReplied,
    NodeState,
    Plan,
    RunSnapshot,
    RunStatus,
    RunTools,
    SubagentRecord,
    ToolsOutcomeUnknown,
    WriteHandoff,
)
from openflow.engine.step import Step
from openflow.engine.transcript import Attachment


def _finish(step: Step, facts: tuple[Fact, ...] = ()) -> Plan:
    status: RunStatus = step.s.status
    # Every field is the engine's own, of its type already: the plan is not validated again.
    return trusted(
        Plan,
        {
            "snapshot": step.s,
            "events": tuple(step.events),
            "intents": tuple(step.intents),
            "awaiting": awaiting(step),
            "done": step.s.finished,
            "status": status,
            "rejected": None,
            "facts": facts,
        },
    )


def _eager_answers(step: Step, facts: Sequence[Fact]) -> tuple[Fact, ...]:
    """The batches planned in this step that a model turn's eager reads already answered.

    A reply's reads answer the first batch planned for its node, and only if that batch has
    exactly the reply's calls: the batch leaves the plan and its results become a fact for
    the next step. Reads that answer nothing are dropped (the batch runs as usual).
    """
    eager = {
        f.node_id: f for f in facts if isinstance(f, ModelReplied) and f.eager and f.in_transcript
    }
    if not eager:
        return ()
    answers: list[Fact] = []
    kept: list[Intent] = []
    for intent in step.intents:
        found = eager.pop(intent.node_id, None) if isinstance(intent, RunTools) else None
        if (
            not isinstance(intent, RunTools)
            or found is None
            or found.eager is None
            or not _same_calls(found, intent)
        ):
            kept.append(intent)
            continue
        first = (found.persisted_len or 0) + len(reply_items(found.reply))
        update = {"batch_id": intent.batch_id, "store_index": found.eager.store_index + first}
        answers.append(found.eager.model_copy(update={**update, "in_transcript": True}))
    step.intents[:] = kept
    return tuple(answers)


def _same_calls(reply: ModelReplied, batch: RunTools) -> bool:
    asked = tuple((call.id, call.name, call.arguments) for call in reply.reply.tool_calls)
    return asked == tuple((call.id, call.name, call.arguments) for call in batch.calls)


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
    entrypoint_attachments: Iterable[Attachment] = (),
    budget: Budget | None = None,
) -> Plan:
    """A new run's first plan: the initial snapshot and its first model calls.

    An invalid workflow ends the run at once with every problem named; `warnings` (servers
    skipped at start and the like) become non-fatal `Error` events. `agents` are the saved
    agents (`agents.json`); the run keeps the ones its nodes may call (spec 6). `review`: a
    post-run review call ends a successful run (spec 12). `limits`: the run enforces
    `engine.limits` (an entrypoint or workflow over one ends it at once, too-long texts from
    people are refused). `budget`: the run's own, over the workflow's `settings.budget` field
    by field (`engine.budget`).
    """
    kept = snapshot_agents(workflow, list(agents))
    plan_mode = workflow.settings.plan_mode
    source = plan_mode.evidence_source_node_id if plan_mode is not None else None
    snapshot = RunSnapshot(
        run_id=run_id,
        workflow=workflow,
        entrypoint_text=entrypoint_text,
        entrypoint_attachments=tuple(entrypoint_attachments),
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
        budget=run_budget(workflow.settings.budget, budget),
    )
    step = Step(snapshot, now_ms)
    too_long = text_limit_problem(
        MAX_ENTRYPOINT_BYTES, entrypoint_text, "the entrypoint", "start it with a shorter text"
    )
    shown = entrypoint_text
    if limits and too_long is not None:
        shown = entrypoint_text[:IGNORED_TEXT_CHARS] + "…"
    step.emit(
        RunStarted(
            workflow_id=workflow.id,
            workflow_name=workflow.name,
            entrypoint_text=shown,
            attachments=tuple(entrypoint_attachments),
            execution_cwd=execution_dir or None,
            project_id=project_root or None,
        )
    )
    warnings = list(warnings)
    for warning in warnings:
        text = warning if warning.startswith("ignored ") else f"ignored {warning}"
        step.emit(Error(message=text))
    for node_id, notice in mcp_notices(workflow, warnings):
        step.emit(ChatMessage(node_id=node_id, role="system", content=notice))
    problems = _problems(workflow, limits)
    if start_error is not None:
        step.terminal("", f"the run could not start: {start_error}")
    elif limits and too_long is not None:
        step.terminal("", f"the run could not start: {too_long}")
    elif problems:
        first = problems[0]
        step.terminal(
            first.node_id or "",
            "invalid workflow: " + "; ".join(str(p) for p in problems),
        )
    schedule(step)
    return _finish(step)


#: The problems of the workflows runs started with lately, by their JSON and `limits`: every
#: run of a workflow starts with the same (a pure function of them), found once.
_PROBLEMS: dict[tuple[str, bool], tuple[WorkflowValidationError, ...]] = {}
_KNOWN_WORKFLOWS = 64


def _problems(workflow: Workflow, limits: bool) -> list[WorkflowValidationError]:
    key = (workflow.model_dump_json(), limits)
    found = _PROBLEMS.get(key)
    if found is None:
        if len(_PROBLEMS) >= _KNOWN_WORKFLOWS:
            _PROBLEMS.clear()
        found = _PROBLEMS[key] = tuple(workflow_problems(workflow, limits=limits))
    return list(found)


def mcp_notices(workflow: Workflow, warnings: Sequence[str]) -> list[tuple[str, str]]:
    """The System messages MCP setup leaves in chats (spec 4.8): a server or tool skipped at
    setup on the first node's, an MCP resource or prompt that could not be resolved on its
    node's."""
    notices: list[tuple[str, str]] = []
    skipped = [w for w in warnings if w.startswith(("ignored MCP ", "ignored every MCP "))]
    if skipped and workflow.nodes:
        targets = {e.to for e in workflow.edges}
        roots = sorted(n.id for n in workflow.nodes if n.id not in targets)
        first = roots[0] if roots else min(n.id for n in workflow.nodes)
        notices += [(first, "Skipped " + w.removeprefix("ignored ")) for w in skipped]
    for node in sorted(workflow.nodes, key=lambda n: n.id):
        told: set[str] = set()
        for snap in node.agent.mcp_context_snapshots:
            if not snap.error:
                continue
            # A server that could not be set up is told once, whatever the node asked of it.
            text = (
                snap.error
                if snap.error.startswith("MCP server ")
                else f"MCP {snap.kind} {snap.source!r} of server {snap.server_id!r} was left "
                f"out: {snap.error}"
            )
            if text not in told:
                told.add(text)
                notices.append((node.id, text))
    return notices


def eager_tools(snapshot: RunSnapshot, node_id: str, offered: Iterable[str]) -> tuple[str, ...]:
    """The read-tier tools a node's model turn may run as soon as the model asks for them.

    Their results come back in the reply's fact (`ModelReplied.eager`) and answer the batch the
    engine plans from that reply (`Plan.facts`), if it has exactly those calls. Empty when the node's approval mode would ask before a read.
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


def advance(
    snapshot: RunSnapshot, facts: Sequence[Fact], now_ms: int, *, each: bool = False
) -> Plan:
    """Fold facts into the run and plan what comes next: once all are folded in or, with
    `each`, after each one, so that a step of several facts plans what steps of one fact
    each, in the same order, would have planned."""
    step = Step(snapshot, now_ms)
    for fact in facts:
        on_fact(step, fact)
        if each:
            schedule(step)
    if not each or not facts:
        schedule(step)
    return _finish(step, _eager_answers(step, facts))


def continuation_problem(snapshot: RunSnapshot, node_id: str, text: str) -> str | None:
    """Why a resume cannot give `node_id` the message `text`, or None when it can.

    The node must be waiting for input, failed or interrupted once the resume has settled
    what was in flight (a call or a subagent in flight is interrupted by it).
    """
    problem = text_limit_problem(MAX_MESSAGE_BYTES, text, "the message", "send a shorter text")
    if problem is not None:
        return problem
    if not text.strip():
        return "the message is empty"
    ns = snapshot.nodes.get(node_id)
    if ns is None or snapshot.workflow.find_node(node_id) is None:
        known = ", ".join(sorted(snapshot.nodes))
        return f"unknown node {node_id!r} (the run's nodes: {known})"
    if (
        ns.awaiting
        or ns.failed is not None
        or ns.interrupted
        or ns.conversation.in_flight is not None
        or ns.child is not None
    ):
        return None
    return (
        f"node {node_id!r} is not waiting, failed or interrupted, so a resume cannot give it "
        "a message"
    )


def resume(snapshot: RunSnapshot, now_ms: int, continuation: Continuation | None = None) -> Plan:
    """Continue a stopped, paused or failed run: interrupted nodes are retried at once.

    A `continuation` gives one node a message as its next user turn: its answer when it
    waits for input, else the message of its retry (spec 8.5).

    Work that was in flight when the snapshot was taken is settled first: model calls are
    retried, read-only tool batches are sent again, and side-effecting batches are settled as
    outcome unknown (never re-sent). A running subagent is ended as interrupted (its parent's
    call gets the interrupted result) and the parent is retried; it may call the subagent
    again, from scratch. A frozen change evidence packet that no longer matches its
    hash or its pinned source fails the run instead of feeding later nodes.
    """
    step = Step(snapshot, now_ms)
    previous = step.s.status
    step.s.finished = False
    step.s.cancel_requested = False
    step.s.terminal_error = None
    step.s.terminal_node = None
    step.s.status = "running"
    step.emit(RunResumed(from_status=previous))
    # A review cut off by the checkpoint is asked again.
    step.s.review_call = None
    packet = step.s.packet
    problem = packet.problem(step.s.plan_source) if packet is not None else None
    if problem is not None:
        step.terminal(step.s.plan_source or "", f"cannot resume: {problem}")
    for node_id in sorted(step.s.nodes):
        if step.s.nodes[node_id].child is not None and node_id in step.by_id:
            abort_child(step, node_id)
            step.update_node(node_id, phase=Interrupted())
    for batch_id, batch in sorted(step.s.batches.items()):
        if batch.in_flight and batch.side_effects:
            on_tools_unknown(step, ToolsOutcomeUnknown(batch_id=batch_id))
        elif batch.in_flight:
            batch.in_flight = False
    for node_id in sorted(step.s.nodes):
        if step.node(node_id).conversation.in_flight is not None:
            step.update_node(node_id, phase=Interrupted())
        step.update_node(node_id, pending_repair=None)
        update_conversation(step, Seat(node_id), in_flight=None, backoff_until_ms=None)
        ns = step.node(node_id)
        node = step.by_id.get(node_id)
        if ns.handoff_job is not None and node is not None:
            fmt = node.agent.handoff.format
            if fmt in ("json", "markdown"):
                step.intents.append(
                    WriteHandoff(node_id=node_id, format=fmt, output=ns.handoff_job.get("output"))
                )
            else:
                ns = step.update_node(node_id, phase=Interrupted())
        if ns.interrupted:
            given = continuation is not None and continuation.node_id == node_id
            retry(step, node_id, continuation.text if given and continuation else None)
    if continuation is not None:
        _continue_with(step, snapshot, continuation)
    announce_pauses(step)
    schedule(step)
    return _finish(step)


def _continue_with(step: Step, before: RunSnapshot, continuation: Continuation) -> None:
    """Give the continuation to a node that waits or failed (an interrupted one already has
    it as its retry's message); anything else is recorded as ignored."""
    node_id = continuation.node_id
    problem = continuation_problem(before, node_id, continuation.text)
    if problem is not None:
        action = {"kind": "continuation", "node_id": node_id}
        step.emit(ActionIgnored(action=action, reason=problem))
        return
    ns = step.node(node_id)
    if ns.awaiting:
        give_input(step, node_id, continuation.text)
    elif ns.failed is not None:
        retry(step, node_id, continuation.text)


__all__ = [
    "advance",
    "backoff_delay_ms",
    "check",
    "continuation_problem",
    "eager_tools",
    "error_text",
    "jitter_ms",
    "mcp_notices",
    "reply_items",
    "resume",
    "start",
    "structured_problem",
]
