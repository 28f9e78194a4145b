"""Tool tiers, concurrency classes and the approval decision matrix (spec 4.1, 4.5)."""

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
SHARED_TOOLS = READ_TIER_TOOLS | {"openflow_declare_subagents", "openflow_call_subagent"}
HARNESS_SUBMIT = "openflow_submit_node_output"
HARNESS_REQUEST_INPUT = "openflow_request_user_input"
HARNESS_ASK_QUESTION = "openflow_ask_user_question"
HARNESS_TOOLS = (HARNESS_SUBMIT, HARNESS_REQUEST_INPUT, HARNESS_ASK_QUESTION)
SEAL_TOOL = "openflow_write_plan_artifact"

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


def batch_has_side_effects(names: list[str], arguments: list[dict[str, Any]]) -> bool:
    """A batch is side-effecting (sent at most once) when any call is write-tier."""
    return any(tool_tier(n, a) == "write" for n, a in zip(names, arguments, strict=True))


__all__ = [
    "HARNESS_ASK_QUESTION",
    "HARNESS_REQUEST_INPUT",
    "HARNESS_SUBMIT",
    "HARNESS_TOOLS",
    "READ_TIER_TOOLS",
    "SEAL_TOOL",
    "Concurrency",
    "Decision",
    "Tier",
    "approval_decision",
    "batch_has_side_effects",
    "tool_concurrency",
    "tool_tier",
]
