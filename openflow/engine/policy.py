"""Tool tiers, concurrency classes, the approval matrix and Plan Mode's capability (4.1, 4.5, 11)."""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

Tier = Literal["read", "write"]
Decision = Literal["allow", "prompt", "deny"]
Concurrency = Literal["shared", "exclusive", "node_exclusive"]

READ_TIER_TOOLS = frozenset(
    {"read", "ls", "search", "find", "ast_grep", "web_search", "openflow_update_todo_list"}
)
#: Read-tier tools a model turn may run right after its reply, inside the same activity, when the
#: node's approval mode lets reads through: running one twice changes nothing.
EAGER_TOOLS = frozenset({"read", "ls", "search", "find", "ast_grep"})
DECLARE_SUBAGENTS = "openflow_declare_subagents"
CALL_SUBAGENT = "openflow_call_subagent"
RUNTIME_TOOLS = (DECLARE_SUBAGENTS, CALL_SUBAGENT)
SHARED_TOOLS = READ_TIER_TOOLS | set(RUNTIME_TOOLS)
HARNESS_SUBMIT = "openflow_submit_node_output"
HARNESS_REQUEST_INPUT = "openflow_request_user_input"
HARNESS_ASK_QUESTION = "openflow_ask_user_question"
HARNESS_TOOLS = (HARNESS_SUBMIT, HARNESS_REQUEST_INPUT, HARNESS_ASK_QUESTION)
SEAL_TOOL = "openflow_write_plan_artifact"
PLAN_URI = "run://PLAN.md"
PLAN_MUTATORS = ("write", "edit")
SEALED_FROM = {"sealed_from": PLAN_URI}

PlanVerdict = Literal["normal", "allow", "prompt", "deny"]

NON_SOURCE_PLAN_REASON = (
    "only the selected Plan Mode evidence source node may mutate or seal run://PLAN.md"
)
_PLAN_CLOSED_REASON = (
    "blocked by Plan Mode — the plan is sealed and the run is executing, so run://PLAN.md and "
    f"{SEAL_TOOL} are closed; work from the change evidence packet in your input"
)
_PLAN_OFF_REASON = (
    "blocked by Plan Mode — this run has no Plan Mode, so run://PLAN.md and "
    f"{SEAL_TOOL} are not available; write files in the execution folder instead"
)
_PLAN_BASH_REASON = (
    "blocked by Plan Mode — bash cannot run while the plan is being made; inspect with read, "
    "ls, search or find instead"
)
_PLAN_WRITE_REASON = (
    "blocked by Plan Mode — until the plan is sealed only repo-relative docs/**/*.md files may "
    "be written (and run://PLAN.md by the plan source)"
)
_PLAN_READ_ONLY_REASON = (
    "blocked by Plan Mode — this node is read-only, so it may not write files while planning"
)

_FIND_FORBIDDEN = re.compile(r"^-(delete|exec\w*|ok\w*|fprint\w*|fls\w*)$")
_SHELL_META = ("\n", "\r", "|", "&", ";", ">", "<", "$", "`")


def _bash_is_read_only(arguments: dict[str, Any]) -> bool:
    command = arguments.get("command")
    if not isinstance(command, str) or any(ch in command for ch in _SHELL_META):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words:
        return False
    if words[0] == "ls":
        return True
    if words[0] == "find":
        return not any(_FIND_FORBIDDEN.match(word) for word in words[1:])
    return False


def tool_tier(name: str, arguments: dict[str, Any] | None = None) -> Tier:
    """The approval tier of a call, by tool name (plain `ls`/`find` bash commands are reads)."""
    if name in READ_TIER_TOOLS:
        return "read"
    if name == "bash" and arguments is not None and _bash_is_read_only(arguments):
        return "read"
    return "write"


def tool_concurrency(name: str) -> Concurrency:
    """How a tool may run beside others in one batch (spec 4.5)."""
    if name in SHARED_TOOLS:
        return "shared"
    if name == "bash":
        return "node_exclusive"
    return "exclusive"


def approval_decision(mode: str, tier: Tier) -> Decision:
    """The ApprovalMode x tier matrix (spec 4.1), with `read_only` enforced, not only filtered.

    Unlike the original, a write-tier call that reaches a `read_only` node is denied.
    """
    if mode == "yolo":
        return "allow"
    if mode == "always_ask":
        return "prompt"
    if mode == "read_only":
        return "allow" if tier == "read" else "deny"
    return "allow" if tier == "read" else "prompt"


def mutation_paths(name: str, arguments: dict[str, Any]) -> list[str]:
    """The paths a `write`/`edit` call targets: `path`, plus `¶path#TAG` hashline sections."""
    paths: list[str] = []
    path = arguments.get("path")
    if isinstance(path, str):
        paths.append(path)
    text = arguments.get("input")
    if name == "edit" and isinstance(text, str):
        for line in text.splitlines():
            if line.startswith("¶"):
                paths.append(line[1:].split("#", 1)[0].strip())
    return paths


def is_docs_markdown(path: str) -> bool:
    """A repo-relative `docs/**/*.md` path: relative, lowercase `.md`, no `..`, no `:`."""
    clean = path[2:] if path.startswith("./") else path
    if not clean or clean.startswith("/") or "\\" in clean or ":" in clean:
        return False
    parts = clean.split("/")
    if ".." in parts or parts[0] != "docs" or len(parts) < 2:
        return False
    return parts[-1].endswith(".md") and len(parts[-1]) > 3


def plan_verdict(
    name: str,
    arguments: dict[str, Any],
    *,
    plan_mode: bool,
    planning: bool,
    is_source: bool,
    read_only: bool,
) -> tuple[PlanVerdict, str | None]:
    """What the run's tool access policy says about one call (spec 4.3 steps 4-6, spec 11).

    `normal` means the approval matrix decides; `allow` queues without approval (the source's
    draft), `prompt` always asks (the seal), `deny` comes with the reason the model is shown.
    """
    paths = mutation_paths(name, arguments) if name in PLAN_MUTATORS else []
    draft = PLAN_URI in paths
    if name == SEAL_TOOL or draft:
        if not plan_mode:
            return "deny", _PLAN_OFF_REASON
        if not planning:
            return "deny", _PLAN_CLOSED_REASON
        if not is_source:
            return "deny", NON_SOURCE_PLAN_REASON
        if name == SEAL_TOOL:
            return "prompt", None
        if any(p != PLAN_URI for p in paths):
            return "deny", _PLAN_WRITE_REASON
        return "allow", None
    if not planning or name in READ_TIER_TOOLS:
        return "normal", None
    if name == "bash":
        return "deny", _PLAN_BASH_REASON
    if name in PLAN_MUTATORS:
        if read_only:
            return "deny", _PLAN_READ_ONLY_REASON
        if paths and all(is_docs_markdown(p) for p in paths):
            return "normal", None
        return "deny", _PLAN_WRITE_REASON
    return "deny", (
        f"blocked by Plan Mode — {name} is not available while the plan is being made; only "
        "read-tier tools and docs/**/*.md notes are"
    )


def planning_tool_names(names: list[str], *, read_only: bool, is_source: bool) -> list[str]:
    """The executable tools a node is offered while planning (spec 4.2 planning policy)."""
    offered = [
        n
        for n in names
        if n in READ_TIER_TOOLS or (n in PLAN_MUTATORS and (is_source or not read_only))
    ]
    if is_source and SEAL_TOOL not in offered:
        offered.append(SEAL_TOOL)
    return offered


def batch_has_side_effects(names: list[str], arguments: list[dict[str, Any]]) -> bool:
    """A batch is side-effecting (sent at most once) when any call is write-tier."""
    return any(tool_tier(n, a) == "write" for n, a in zip(names, arguments, strict=True))


__all__ = [
    "EAGER_TOOLS",
    "CALL_SUBAGENT",
    "DECLARE_SUBAGENTS",
    "NON_SOURCE_PLAN_REASON",
    "PLAN_MUTATORS",
    "PLAN_URI",
    "SEALED_FROM",
    "HARNESS_ASK_QUESTION",
    "HARNESS_REQUEST_INPUT",
    "HARNESS_SUBMIT",
    "HARNESS_TOOLS",
    "READ_TIER_TOOLS",
    "RUNTIME_TOOLS",
    "SEAL_TOOL",
    "Concurrency",
    "Decision",
    "PlanVerdict",
    "Tier",
    "approval_decision",
    "batch_has_side_effects",
    "is_docs_markdown",
    "mutation_paths",
    "plan_verdict",
    "planning_tool_names",
    "tool_concurrency",
    "tool_tier",
]
