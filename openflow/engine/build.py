"""Building each model call's request: a node's, its output repair's and a subagent's.

A request carries the system messages, the node input (upstream outputs, changed files,
reads, the change evidence packet), the offered tools and the harness tools; a node offered
the runtime tools (spec 6) gets the subagent tools with its harness tools.
"""

from __future__ import annotations

import json
from typing import Any

from openflow.engine import prompts
from openflow.engine.classify import TurnError
from openflow.engine.copies import json_copy, replaced
from openflow.engine.events import SubagentSummary
from openflow.engine.harness import cache_key_for, harness_tool_specs, submission_parameters
from openflow.engine.policy import (
    CALL_SUBAGENT,
    DECLARE_SUBAGENTS,
    HARNESS_SUBMIT,
    RUNTIME_TOOLS,
    planning_tool_names,
)
from openflow.engine.protocol import REPAIR_SUFFIX
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.spec import (
    DEFAULT_OUTPUT_SCHEMA,
    CallableAgent,
    Node,
    Workflow,
    effective_output_schema,
    submission_schema,
)
from openflow.engine.state import ChildRun, SubagentRecord
from openflow.engine.step import Step

_DECLARE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "subagents": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"name": {"type": "string"}, "purpose": {"type": "string"}},
                "required": ["name", "purpose"],
            },
        }
    },
    "required": ["subagents"],
}
_CALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"subagent_id": {"type": "string"}, "input": {"type": "string"}},
    "required": ["subagent_id", "input"],
}


# --- a node's request -------------------------------------------------------------------


def system_messages(step: Step, node: Node) -> list[str]:
    agent = node.agent
    messages: list[str] = []
    own = (agent.system_prompt or "").strip()
    plan_source = step.is_plan_source(node.id)
    if prompts.RUNTIME_MARKER not in own:
        messages.append(prompts.RUNTIME_PREAMBLE)
    if plan_source:
        messages.append(prompts.PLAN_SOURCE_BLOCK)
    if not agent.request_user_input and not plan_source:
        messages.append(prompts.AUTONOMOUS_BLOCK)
    if agent.conversation_mode:
        messages.append(prompts.CONVERSATION_BLOCK)
    block = prompts.handoff_block(agent.handoff.format, getattr(agent.handoff, "template", None))
    if block:
        messages.append(block)
    if step.s.project_root:
        messages.append(prompts.project_block(step.s.project_root))
    if own:
        messages.append(own)
    shared = (step.wf.settings.shared_context or "").strip()
    if shared:
        messages.append(f"--- Workflow context ---\n{shared}")
    if agent.mcp_context_snapshots:
        messages.append(
            prompts.mcp_context_block(
                [s.model_dump(mode="json") for s in agent.mcp_context_snapshots]
            )
        )
    return messages


def node_input(step: Step, node_id: str) -> dict[str, Any]:
    upstream: list[dict[str, Any]] = []
    for parent in step.parents_of(node_id):
        pn = step.s.nodes.get(parent)
        if pn is None or not pn.has_output:
            continue
        entry: dict[str, Any] = {"node_id": parent, "output": pn.output}
        if pn.handoff is not None:
            entry["handoff"] = pn.handoff
        upstream.append(entry)
    data: dict[str, Any] = {}
    attachments = step.s.entrypoint_attachments
    if not upstream and (step.s.entrypoint_text.strip() or attachments):
        data["entrypoint"] = {"text": step.s.entrypoint_text}
        if attachments:
            data["entrypoint"]["attachments"] = [
                a.model_dump(mode="json", exclude_none=True) for a in attachments
            ]
    data["upstream"] = upstream
    changed: dict[str, dict[str, Any]] = {}
    reads: list[dict[str, Any]] = []
    for anc in step.ancestors_of(node_id):
        an = step.s.nodes.get(anc)
        if an is None:
            continue
        for record in an.changed_files:
            path = str(record.get("rename_to") or record.get("path", ""))
            prior = changed.get(path)
            if prior is None or int(record.get("timestamp_ms", 0)) >= int(
                prior.get("timestamp_ms", 0)
            ):
                changed[path] = record
        reads.extend(an.reads)
    if changed:
        data["changed_files"] = [
            {
                k: v
                for k, v in (
                    ("path", r.get("path")),
                    ("op", r.get("op")),
                    ("renameTo", r.get("rename_to")),
                    ("diffSummary", r.get("diff_summary")),
                )
                if v is not None
            }
            for _, r in sorted(changed.items())
        ]
    if reads and step.wf.settings.forward_upstream_reads:
        data["reads"] = [
            {k: v for k, v in (("path", r.get("path")), ("outline", r.get("outline"))) if v}
            for r in reads
        ]
    if step.s.packet is not None:
        data["change_evidence_packet"] = step.s.packet.as_input()
    return data


def offers_runtime(step: Step, node_id: str) -> bool:
    """Whether the node is offered the runtime tools (spec 4.2: execution, not read-only)."""
    return not step.s.planning and step.approval_mode(node_id) != "read_only"


def offered_tools(step: Step, node_id: str) -> list[str]:
    """The executable tools the node is offered, then the runtime tools when it has them."""
    names = step.s.tool_names or []
    read_only = step.approval_mode(node_id) == "read_only"
    if step.s.planning:
        offered = planning_tool_names(
            names, read_only=read_only, is_source=node_id == step.s.plan_source
        )
    elif read_only:
        offered = [n for n in names if step.tier_of(n) == "read"]
    else:
        offered = list(names)
    if offers_runtime(step, node_id):
        offered += [n for n in RUNTIME_TOOLS if n not in offered]
    return offered


def build_request(step: Step, node_id: str) -> AgentRequest | None:
    """The node's next request, or None (the run fails) when it has no model."""
    node = step.by_id[node_id]
    agent = node.agent
    ns = step.node(node_id)
    patch = ns.runtime_patch
    model = step.node_model(node_id)
    if not model:
        step.terminal(
            node_id,
            f'node "{node.label}" has no model configured — select a model '
            "(or a provider profile with a default_model) before running",
        )
        return None
    tools_cfg = agent.tools
    effort = patch.get("reasoning_effort", agent.reasoning_effort)
    budget = patch.get("reasoning_budget_tokens", agent.reasoning_budget_tokens)
    tool_names = offered_tools(step, node_id)
    conversation = bool(agent.conversation_mode)
    node_input_data = node_input(step, node_id)
    request = AgentRequest(
        workflow_id=step.wf.id,
        run_id=step.s.run_id,
        node_id=node_id,
        node_label=node.label,
        model=model,
        provider_id=agent.provider_id or step.wf.settings.provider_id,
        system_messages=tuple(system_messages(step, node)),
        task_prompt=agent.task_prompt,
        input=node_input_data,
        output_schema=submission_schema(agent),
        tool_names=tuple(tool_names),
        entrypoint_attachments=(
            step.s.entrypoint_attachments if "entrypoint" in node_input_data else ()
        ),
        tool_choice="auto" if conversation else "required",
        reasoning_effort=effort if isinstance(effort, str) else None,
        reasoning_budget_tokens=budget if isinstance(budget, int) else None,
        fast_mode=bool(patch.get("fast_mode", step.wf.settings.fast_mode)),
        tool_access_policy="planning" if step.s.planning else "execution",
        allow_user_input=step.conversational(node_id),
        conversation_mode=conversation,
        cache_key=cache_key_for(step.wf.id, node_id, tool_names),
        turn_index=ns.calls_done,
    )
    available = (
        [(r.name, r.id) for r in callable_records(step, node_id)]
        if offers_runtime(step, node_id)
        else None
    )
    harness = _node_harness(
        request,
        bool(tools_cfg.allow_free_text_user_input),
        bool(tools_cfg.allow_structured_user_input),
        available,
    )
    return replaced(request, {"harness_tools": harness})


#: The harness tools of recent node requests, by what they are made of (`_node_harness`):
#: frozen, shared by every call that offers the same.
_HARNESS: dict[str, tuple[ToolSpec, ...]] = {}
_KNOWN_HARNESS = 256


def _node_harness(
    request: AgentRequest,
    free_text: bool,
    structured: bool,
    available: list[tuple[str, str]] | None,
) -> tuple[ToolSpec, ...]:
    """A node request's harness tools, then the runtime ones when `available` (the callable
    subagents) is not None."""
    key = json.dumps(
        [request.output_schema, request.allow_user_input, free_text, structured, available]
    )
    found = _HARNESS.get(key)
    if found is None:
        harness = harness_tool_specs(
            request, allow_free_text_input=free_text, allow_structured_input=structured
        )
        if available is not None:
            harness += [declare_tool_spec(), call_tool_spec(available)]
        if len(_HARNESS) >= _KNOWN_HARNESS:
            _HARNESS.clear()
        found = _HARNESS[key] = tuple(harness)
    return found


def build_repair_request(step: Step, node_id: str, err: TurnError) -> AgentRequest | None:
    """The output repair call's request for a malformed submit (spec 3.9), or None."""
    node = step.by_id[node_id]
    model = (step.wf.settings.output_repair_model or "").strip() or step.node_model(node_id)
    if not model:
        return None
    repair_id = node_id + REPAIR_SUFFIX
    envelope = submission_parameters(
        AgentRequest(
            workflow_id=step.wf.id,
            node_id=node_id,
            node_label=node.label,
            model=model,
            output_schema=submission_schema(node.agent),
        )
    )
    request = AgentRequest(
        workflow_id=step.wf.id,
        run_id=step.s.run_id,
        node_id=repair_id,
        node_label=f"{node.label} (output repair)",
        model=model,
        provider_id=node.agent.provider_id or step.wf.settings.provider_id,
        system_messages=(prompts.REPAIR_SYSTEM,),
        task_prompt=prompts.REPAIR_TASK,
        input={
            "malformed_arguments": err.candidate,
            "validation_detail": err.message,
            "tool_name": HARNESS_SUBMIT,
            "expected_output_schema": envelope,
        },
        output_schema=dict(prompts.REPAIR_OUTPUT_SCHEMA),
        cache_key=cache_key_for(step.wf.id, repair_id, []),
        turn_index=step.node(node_id).repairs_done,
    )
    harness = harness_tool_specs(request)
    return request.model_copy(update={"harness_tools": tuple(harness)})


# --- who a node may call (spec 6) -------------------------------------------------------


def snapshot_agents(workflow: Workflow, agents: list[CallableAgent]) -> list[CallableAgent]:
    """The saved agents a run keeps (spec 6): those nodes name (or all), first of an id wins."""
    if any(node.agent.allow_all_callable_agents for node in workflow.nodes):
        chosen = list(agents)
    else:
        wanted = {aid for node in workflow.nodes for aid in node.agent.callable_agents}
        chosen = [agent for agent in agents if agent.id in wanted]
    kept: dict[str, CallableAgent] = {}
    for agent in chosen:
        kept.setdefault(agent.id, agent)
    return list(kept.values())


def saved_agent(step: Step, subagent_id: str) -> CallableAgent | None:
    return next((a for a in step.s.agents if a.id == subagent_id), None)


def saved_agents_of(step: Step, node_id: str) -> list[CallableAgent]:
    """The saved agents a node may call, in the order it lists them."""
    agent = step.by_id[node_id].agent
    if agent.allow_all_callable_agents:
        return list(step.s.agents)
    found = [saved_agent(step, aid) for aid in dict.fromkeys(agent.callable_agents)]
    return [a for a in found if a is not None]


def callable_records(step: Step, node_id: str) -> list[SubagentRecord]:
    """The node's saved agents, then the subagents it declared, as records."""
    records = [step.s.subagents.get(a.id) for a in saved_agents_of(step, node_id)]
    records += [r for r in step.s.subagents.values() if r.owner == node_id]
    return [r for r in records if r is not None]


def summary(record: SubagentRecord) -> SubagentSummary:
    return SubagentSummary(
        id=record.id, name=record.name, purpose=record.purpose, status=record.status
    )


def declare_tool_spec() -> ToolSpec:
    """`openflow_declare_subagents` as models see it."""
    return ToolSpec(
        name=DECLARE_SUBAGENTS,
        description=prompts.DECLARE_SUBAGENTS_DESCRIPTION,
        parameters=json_copy(_DECLARE_PARAMETERS),
        tier="write",
        concurrency="shared",
    )


def call_tool_spec(available: list[tuple[str, str]]) -> ToolSpec:
    """`openflow_call_subagent`, its description listing `(name, id)` of the callable ones."""
    return ToolSpec(
        name=CALL_SUBAGENT,
        description=prompts.call_subagent_description(available),
        parameters=json_copy(_CALL_PARAMETERS),
        tier="write",
        concurrency="shared",
    )


# --- a subagent's request ---------------------------------------------------------------


def child_config(step: Step, node_id: str, child: ChildRun) -> tuple[str, dict[str, Any], str, str]:
    """The child's system prompt, output schema, approval mode and model."""
    record = step.s.subagents.get(child.subagent_id)
    saved = saved_agent(step, child.subagent_id)
    if record is not None and record.owner is None and saved is not None:
        mode = saved.tools.approval_mode or "write"
        model = saved.model.strip() or step.node_model(node_id)
        return saved.system_prompt, effective_output_schema(saved), str(mode), model
    name = record.name if record is not None else child.subagent_id
    purpose = record.purpose if record is not None else ""
    system = prompts.adhoc_subagent_system(name, purpose)
    schema = json_copy(DEFAULT_OUTPUT_SCHEMA)
    return system, schema, step.approval_mode(node_id), step.node_model(node_id)


def child_tools(step: Step, mode: str) -> list[str]:
    """The executable tools a subagent is offered (spec 4.2 subagent catalog)."""
    names = step.s.tool_names or []
    if mode == "read_only":
        return [n for n in names if step.tier_of(n) == "read"]
    return list(names)


def child_request(step: Step, node_id: str, child: ChildRun) -> AgentRequest | None:
    """The subagent's request (spec 6), or None when no model is configured."""
    system, schema, mode, model = child_config(step, node_id, child)
    if not model:
        return None
    settings = step.wf.settings
    message = prompts.subagent_system_message(system, settings.shared_context or "")
    record = step.s.subagents.get(child.subagent_id)
    tool_names = child_tools(step, mode)
    parent = step.by_id[node_id].agent
    request = AgentRequest(
        workflow_id=step.wf.id,
        run_id=step.s.run_id,
        node_id=child.subagent_id,
        node_label=step.subagent_name(child.subagent_id),
        model=model,
        provider_id=parent.provider_id or settings.provider_id,
        system_messages=(message,) if message else (),
        task_prompt=child.task,
        input=None,
        output_schema=schema,
        tool_names=tuple(tool_names),
        tool_choice="required",
        fast_mode=bool(settings.fast_mode),
        tool_access_policy="execution",
        allow_user_input=False,
        conversation_mode=False,
        cache_key=cache_key_for(step.wf.id, child.subagent_id, tool_names),
        turn_index=record.calls_done if record is not None else 0,
    )
    harness = harness_tool_specs(request)
    if mode != "read_only":
        harness.append(declare_tool_spec())
    return request.model_copy(update={"harness_tools": tuple(harness)})


__all__ = [
    "build_repair_request",
    "build_request",
    "call_tool_spec",
    "callable_records",
    "child_config",
    "child_request",
    "child_tools",
    "declare_tool_spec",
    "node_input",
    "offered_tools",
    "offers_runtime",
    "saved_agent",
    "saved_agents_of",
    "snapshot_agents",
    "summary",
    "system_messages",
]
