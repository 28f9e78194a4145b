"""`openflow_update_todo_list`: the node's visible plan of small steps (spec 4.7)."""

from __future__ import annotations

from typing import Any

from openflow.activities.tools.base import InvalidArgs, Tool, ToolContext, ToolOutput
from openflow.engine.transcript import ToolCall

MAX_ENTRIES = 12
MAX_CONTENT_CHARS = 160
STATUSES = ("pending", "in_progress", "completed")
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def validate_todos(raw: object) -> list[dict[str, str]]:
    """1–12 items of {content (1–160 chars), status}, at most one in progress."""
    tool = TodoTool.name
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ENTRIES:
        raise InvalidArgs(
            tool, f"'todos' must be a list of 1 to {MAX_ENTRIES} items", "send the whole list"
        )
    todos: list[dict[str, str]] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InvalidArgs(tool, f"todos[{index}] is not an object", "use {content, status}")
        content = item.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgs(tool, f"todos[{index}].content is empty", "describe the step")
        if len(content) > MAX_CONTENT_CHARS:
            raise InvalidArgs(
                tool,
                f"todos[{index}].content has {len(content)} characters",
                f"keep each step under {MAX_CONTENT_CHARS} characters",
            )
        status = item.get("status")
        if status not in STATUSES:
            raise InvalidArgs(
                tool, f"todos[{index}].status is {status!r}", f"use one of {', '.join(STATUSES)}"
            )
        todos.append({"content": content.strip(), "status": str(status)})
    active = sum(1 for t in todos if t["status"] == "in_progress")
    if active > 1:
        raise InvalidArgs(
            tool, f"{active} items are in_progress", "mark at most one item in_progress"
        )
    return todos


class TodoTool(Tool):
    name = "openflow_update_todo_list"
    description = (
        "Replace your todo list (1-12 short steps, at most one in_progress) to show the plan "
        "and progress of this node."
    )
    parameters = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_ENTRIES,
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1, "maxLength": 160},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["todos"],
    }
    tier = "read"
    concurrency = "shared"

    def validate(self, args: dict[str, Any]) -> None:
        validate_todos(args.get("todos"))
        super().validate(args)

    async def run(self, ctx: ToolContext, call: ToolCall, args: dict[str, Any]) -> ToolOutput:
        todos = validate_todos(args.get("todos"))
        done = sum(1 for t in todos if t["status"] == "completed")
        lines = [f"Todo list updated ({done}/{len(todos)} completed):"]
        lines += [f"{_MARKS[t['status']]} {t['content']}" for t in todos]
        return ToolOutput(content="\n".join(lines), output_meta={"todos": todos})


__all__ = ["TodoTool", "validate_todos"]
