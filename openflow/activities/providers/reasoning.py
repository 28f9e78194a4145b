"""Claude thinking by model family (OPENFLOW_SPEC 10.3), shared by Anthropic and Bedrock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from openflow.activities.providers.errors import ProviderError

BUDGET_TIERS = {"low": 10_240, "medium": 40_960, "adaptive": 40_960, "high": 59_000}
MIN_BUDGET = 1_024
MAX_BUDGET = 59_000
ADAPTIVE_MIN_MAX_TOKENS = 16_000
MANUAL_HEADROOM = 4_096

_FAMILY = re.compile(r"claude-([a-z]+)-(\d+)(?:-(\d+))?")
_CLAUDE_3_7 = re.compile(r"claude-3-7")
_CLAUDE_3 = re.compile(r"claude-3")

DEFAULT_MIN_OUTPUT = 16_384
CLAUDE_3_OUTPUT = 8_192


@dataclass(frozen=True)
class ClaudeThinking:
    """The thinking knobs for one Claude request."""

    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    min_max_tokens: int = 0

    @property
    def active(self) -> bool:
        """Whether the model will think (which forces tool choice `auto`)."""
        return self.thinking is not None and self.thinking.get("type") != "disabled"


def _family(model: str) -> tuple[str, int, int] | None:
    match = _FAMILY.search(model.lower())
    if not match:
        return None
    minor_text = match.group(3) or "0"
    minor = int(minor_text) if len(minor_text) <= 2 else 0  # a date suffix, not a minor version
    return match.group(1), int(match.group(2)), minor


def _version(model: str) -> tuple[int, int] | None:
    family = _family(model)
    return None if family is None else (family[1], family[2])


def thinking_family(model: str) -> str:
    """`adaptive`, `manual` or `none`: how this model takes a reasoning effort."""
    lowered = model.lower()
    if "claude" not in lowered:
        return "none"
    if _CLAUDE_3_7.search(lowered):
        return "manual"
    version = _version(lowered)
    if version is None:
        return "none"
    if version >= (4, 6):
        return "adaptive"
    if version[0] >= 4:
        return "manual"
    return "none"


def claude_output_limit(model: str) -> int:
    """Default max_tokens when the node sets none: Claude 4 limits, else a 16K floor."""
    lowered = model.lower()
    if _CLAUDE_3_7.search(lowered):
        return 64_000
    family = _family(lowered)
    if family is None:
        return CLAUDE_3_OUTPUT if _CLAUDE_3.search(lowered) else DEFAULT_MIN_OUTPUT
    name, major, minor = family
    if major < 4:
        return CLAUDE_3_OUTPUT
    if name == "opus" and (major, minor) < (4, 5):
        return 32_000
    return 64_000


def claude_thinking(model: str, effort: str | None, budget_tokens: int | None) -> ClaudeThinking:
    """Thinking parameters for a Claude model; non-Claude models and unset effort get none."""
    family = thinking_family(model)
    if family == "none" or effort is None or not effort.strip():
        return ClaudeThinking()
    effort = effort.strip().lower()
    if effort == "none":
        return ClaudeThinking(thinking={"type": "disabled"})
    if family == "adaptive":
        output_config = {"effort": effort} if effort in ("low", "medium", "high") else None
        return ClaudeThinking(
            thinking={"type": "adaptive", "display": "summarized"},
            output_config=output_config,
            min_max_tokens=ADAPTIVE_MIN_MAX_TOKENS,
        )
    if budget_tokens is not None:
        if not MIN_BUDGET <= budget_tokens <= MAX_BUDGET:
            raise ProviderError.of(
                "permanent",
                f"reasoning budget {budget_tokens} is out of range for {model!r}: "
                f"choose {MIN_BUDGET}..{MAX_BUDGET} tokens",
            )
        budget = budget_tokens
    else:
        budget = BUDGET_TIERS.get(effort, BUDGET_TIERS["medium"])
    return ClaudeThinking(
        thinking={"type": "enabled", "budget_tokens": budget},
        min_max_tokens=budget + MANUAL_HEADROOM,
    )


__all__ = [
    "BUDGET_TIERS",
    "ClaudeThinking",
    "claude_output_limit",
    "claude_thinking",
    "thinking_family",
]
