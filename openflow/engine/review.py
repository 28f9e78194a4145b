"""The post-run review (spec 12): one model call after the last node completes, advising how the
workflow could do better next time. It never changes whether the run succeeded."""

from __future__ import annotations

from typing import Any

from openflow.engine.classify import Completed, Outcome, TurnError
from openflow.engine.copies import replaced
from openflow.engine.harness import cache_key_for, harness_tool_specs
from openflow.engine.pretty import pretty_json
from openflow.engine.request import AgentRequest, ToolSpec
from openflow.engine.state import RunSnapshot

REVIEW_NODE = "__post_run_review"
REVIEW_LABEL = "Post-run review"
EVIDENCE_LIMIT = 128 * 1024
MAX_SUGGESTIONS = 5
CATEGORIES = ("prompt", "tools", "workflow", "model", "coordination")

NO_REVIEWER = "No reviewer model is configured."
NOT_STRUCTURED = "Reviewer did not return structured suggestions."
CANCELLED = "Post-run review was cancelled."

REVIEW_SYSTEM = """You review a finished OpenFlow run: a workflow of agent nodes that each did a
task and handed a structured output downstream. From the run's evidence (the workflow, each
node's prompts, conversation, retries and output, and the run's metrics), suggest at most five
concrete improvements to the workflow for its next run: clearer prompts, better tools, a
different graph, another model, or better coordination between nodes. Each suggestion names the
node it concerns (or none), quotes the evidence it rests on and says what to change. Suggest
nothing rather than something generic. Submit them with `openflow_submit_node_output`."""

REVIEW_TASK = "Review the finished run and suggest improvements to its workflow."

SUGGESTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "suggestions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "category": {"type": "string", "enum": list(CATEGORIES)},
                    "targetNodeId": {"type": ["string", "null"]},
                    "title": {"type": "string"},
                    "evidence": {"type": "string"},
                    "recommendation": {"type": "string"},
                },
                "required": ["category", "title", "evidence", "recommendation"],
            },
        }
    },
    "required": ["suggestions"],
}


def reviewer_node(snapshot: RunSnapshot) -> str | None:
    """The last node, in the workflow's order, with a model: the review uses its settings."""
    for node in reversed(snapshot.workflow.nodes):
        ns = snapshot.nodes.get(node.id)
        patched = ns.runtime_patch.get("model") if ns is not None else None
        if str(patched or node.agent.model or "").strip():
            return node.id
    return None


def review_request(snapshot: RunSnapshot, node_id: str) -> AgentRequest:
    """The review call's request: the reviewer node's model, provider and reasoning, no tools."""
    node = snapshot.workflow.find_node(node_id)
    assert node is not None
    ns = snapshot.nodes.get(node_id)
    patch = ns.runtime_patch if ns is not None else {}
    agent = node.agent
    settings = snapshot.workflow.settings
    effort = patch.get("reasoning_effort", agent.reasoning_effort or settings.reasoning_effort)
    budget = agent.reasoning_budget_tokens or settings.reasoning_budget_tokens
    request = AgentRequest(
        workflow_id=snapshot.workflow.id,
        run_id=snapshot.run_id,
        node_id=REVIEW_NODE,
        node_label=REVIEW_LABEL,
        model=str(patch.get("model") or agent.model or "").strip(),
        provider_id=agent.provider_id or settings.provider_id,
        system_messages=(REVIEW_SYSTEM,),
        task_prompt=REVIEW_TASK,
        # The conversations stay in the run store: the activity adds them, then renders it all.
        input={"runEvidence": run_evidence(snapshot)},
        output_schema=SUGGESTIONS_SCHEMA,
        reasoning_effort=effort if isinstance(effort, str) else None,
        reasoning_budget_tokens=budget if isinstance(budget, int) else None,
        cache_key=cache_key_for(snapshot.workflow.id, REVIEW_NODE, []),
    )
    if not _HARNESS:
        # The same for every review (its schema is `SUGGESTIONS_SCHEMA`, it asks no one):
        # made once, shared (the tools are frozen).
        _HARNESS.append(tuple(harness_tool_specs(request)))
    return replaced(request, {"harness_tools": _HARNESS[0]})


_HARNESS: list[tuple[ToolSpec, ...]] = []


def run_evidence(snapshot: RunSnapshot) -> dict[str, Any]:
    """What the reviewer reads, except the nodes' conversations (`transcript` is left for the
    activity to fill in from the run store, where they are whole)."""
    wf = snapshot.workflow
    nodes = []
    for node in wf.nodes:
        ns = snapshot.nodes.get(node.id)
        if ns is None:
            continue
        nodes.append(
            {
                "id": node.id,
                "label": node.label,
                "model": str(ns.runtime_patch.get("model") or node.agent.model or ""),
                "systemPrompt": node.agent.system_prompt,
                "taskPrompt": node.agent.task_prompt,
                "modelAttempt": ns.model_attempt,
                "retries": ns.conversation.retries,
                "repairs": ns.repairs_done,
                "transcriptItems": ns.conversation.transcript_offset
                + len(ns.conversation.transcript),
                "output": ns.output,
                "failed": ns.failed,
            }
        )
    return {
        "workflow": {
            "id": wf.id,
            "name": wf.name,
            "edges": [[edge.from_, edge.to] for edge in wf.edges],
        },
        "entrypoint": snapshot.entrypoint_text,
        "nodes": nodes,
        "metrics": {
            "readCalls": snapshot.read_calls,
            "redundantReads": snapshot.redundant_reads,
            "tokensIn": snapshot.tokens_in,
            "tokensOut": snapshot.tokens_out,
            "estimatedCostUsd": snapshot.cost_usd,
        },
        "failedNodes": sorted(n for n, ns in snapshot.nodes.items() if ns.failed is not None),
    }


def render_evidence(evidence: dict[str, Any]) -> tuple[str, bool]:
    """The evidence as the reviewer reads it: pretty JSON, its middle left out past 128 KiB."""
    text = pretty_json(evidence, default=str)
    if len(text) <= EVIDENCE_LIMIT:
        return text, False
    keep = (EVIDENCE_LIMIT - 64) // 2
    elided = len(text) - 2 * keep
    return f"{text[:keep]}\n… [{elided} characters elided] …\n{text[-keep:]}", True


def parse_suggestions(
    outcome: Outcome, node_ids: set[str]
) -> tuple[list[dict[str, Any]], str | None]:
    """The reviewer's suggestions as the report carries them, or why there are none."""
    if isinstance(outcome, TurnError):
        if outcome.error == "malformed":
            return [], f"Reviewer returned invalid suggestions: {outcome.message}"
        return [], NOT_STRUCTURED
    if not isinstance(outcome, Completed) or not isinstance(outcome.output, dict):
        return [], NOT_STRUCTURED
    raw = outcome.output.get("suggestions")
    if not isinstance(raw, list):
        return [], "Reviewer returned invalid suggestions: `suggestions` is not a list"
    kept: list[dict[str, Any]] = []
    for entry in raw[:MAX_SUGGESTIONS]:
        if not isinstance(entry, dict):
            return [], "Reviewer returned invalid suggestions: a suggestion is not an object"
        category = entry.get("category")
        if category not in CATEGORIES:
            return [], f"Reviewer returned invalid suggestions: unknown category {category!r}"
        texts = {k: entry.get(k) for k in ("title", "evidence", "recommendation")}
        if not all(isinstance(v, str) and v.strip() for v in texts.values()):
            continue
        target = entry.get("targetNodeId")
        kept.append(
            {
                "id": f"suggestion-{len(kept) + 1}",
                "category": category,
                "target_node_id": target
                if isinstance(target, str) and target in node_ids
                else None,
                **{k: str(v).strip() for k, v in texts.items()},
            }
        )
    return kept, None


__all__ = [
    "CANCELLED",
    "NOT_STRUCTURED",
    "NO_REVIEWER",
    "REVIEW_LABEL",
    "REVIEW_NODE",
    "SUGGESTIONS_SCHEMA",
    "parse_suggestions",
    "render_evidence",
    "review_request",
    "reviewer_node",
    "run_evidence",
]
