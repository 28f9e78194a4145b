"""The built-in tool catalog and how it is filtered per node (spec 4.2, 4.7)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from openflow.activities.tools.astgrep import AstEditTool, AstGrepTool, ast_grep_binary
from openflow.activities.tools.base import Tool
from openflow.activities.tools.bash import BashTool
from openflow.activities.tools.fs import LsTool, ReadTool
from openflow.activities.tools.patch import ApplyPatchTool
from openflow.activities.tools.plan import SealPlanTool
from openflow.activities.tools.search import FindTool, SearchTool
from openflow.activities.tools.todo import TodoTool
from openflow.activities.tools.writes import EditTool, WriteTool
from openflow.engine.policy import SEAL_TOOL
from openflow.engine.request import ToolAccessPolicy, ToolSpec

INTENT_PROPERTY = {
    "type": "string",
    "description": "Short intent shown to the user in the UI (a few words); ignored by the tool.",
}
PLAN_WRITES = ("write", "edit")
_PLAN_SUFFIX_SOURCE = (
    " Plan Mode: write the plan draft to run://PLAN.md, or Markdown notes under docs/ "
    "(repo-relative docs/**/*.md); nothing else may be written until the plan is approved."
)
_PLAN_SUFFIX = (
    " Plan Mode: only repo-relative docs/**/*.md files may be written until the plan is approved."
)


class ToolRegistry:
    """Executable tools by name; `specs` gives the catalog a node is offered."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; names are unique."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered; pick another name")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool registered under `name`, if any."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def specs(
        self,
        policy: ToolAccessPolicy = "execution",
        *,
        read_only: bool = False,
        plan_source: bool = False,
    ) -> list[ToolSpec]:
        """The catalog for one node, sorted by name.

        Execution: every tool, or only read-tier tools for a `read_only` node. Planning:
        read-tier tools, plus `write`/`edit` (with a Plan Mode note) for nodes that may write
        and for the plan source.
        """
        specs = []
        for name in self.names():
            tool = self._tools[name]
            suffix = ""
            if name == SEAL_TOOL:
                if policy == "planning" and plan_source:
                    specs.append(spec_of(tool))
                continue
            if tool.tier != "read":
                if policy == "planning":
                    if name not in PLAN_WRITES or (read_only and not plan_source):
                        continue
                    suffix = _PLAN_SUFFIX_SOURCE if plan_source else _PLAN_SUFFIX
                elif read_only:
                    continue
            specs.append(spec_of(tool, suffix))
        return specs


def spec_of(tool: Tool, description_suffix: str = "") -> ToolSpec:
    """A tool's ToolSpec with the optional `_i` intent property added to its schema."""
    parameters: dict[str, Any] = copy.deepcopy(tool.parameters)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})["_i"] = dict(INTENT_PROPERTY)
    return ToolSpec(
        name=tool.name,
        description=tool.description + description_suffix,
        parameters=parameters,
        tier=tool.tier,
        concurrency=tool.concurrency,
    )


def builtin_tools() -> list[Tool]:
    """The built-ins of spec 4.7; `ast_grep`/`ast_edit` only when the binary resolves."""
    tools: list[Tool] = [
        ApplyPatchTool(),
        BashTool(),
        EditTool(),
        FindTool(),
        LsTool(),
        ReadTool(),
        SearchTool(),
        TodoTool(),
        WriteTool(),
        SealPlanTool(),
    ]
    binary = ast_grep_binary()
    if binary:
        tools += [AstEditTool(binary), AstGrepTool(binary)]
    return tools


def default_registry() -> ToolRegistry:
    """A registry holding the built-in tools."""
    return ToolRegistry(builtin_tools())


__all__ = ["INTENT_PROPERTY", "ToolRegistry", "builtin_tools", "default_registry", "spec_of"]
