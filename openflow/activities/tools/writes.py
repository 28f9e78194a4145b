"""The writing file tools: `write` and `edit` (replace mode) (spec 3.6, 4.7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openflow.activities.tools.base import (
    FILE_MUTATION_KEY,
    Failed,
    FileOp,
    InvalidArgs,
    NotFound,
    PermissionDenied,
    ThreadTool,
    ToolContext,
    ToolOutput,
)
from openflow.activities.tools.files import (
    decode,
    diff_summary,
    file_change,
    is_binary,
    split_lines,
)
from openflow.activities.tools.fs import PLAN_URI, plan_path, run_files, run_rel
from openflow.activities.tools.sandbox import NotARegularFile, Sandbox


@dataclass(frozen=True)
class _Target:
    """A write/edit target: the folder it is resolved in, its path there, how it is shown."""

    files: Sandbox
    rel: str
    shown: str
    tracked: bool

    def read(self) -> bytes | None:
        try:
            return self.files.read_bytes(self.rel)[0]
        except FileNotFoundError:
            return None
        except NotARegularFile:
            raise Failed(f"{self.shown} is not a regular file — change it with bash") from None

    def write(self, data: bytes, tool: str) -> None:
        try:
            self.files.write_bytes(self.rel, data, tool)
        except IsADirectoryError:
            raise InvalidArgs(tool, f"{self.shown!r} is a directory", "give a file path") from None


def _mutation_target(ctx: ToolContext, tool: str, raw: object) -> _Target:
    """Where a write/edit goes: a file of the execution folder, or the run's plan draft."""
    if raw == PLAN_URI:
        if (ctx.artifacts_dir / "PLAN.sealed.json").exists():
            raise PermissionDenied(
                "run://PLAN.md is sealed; the plan can no longer change in this run"
            )
        return _Target(run_files(ctx), run_rel(ctx, plan_path(ctx)), PLAN_URI, False)
    sandbox = Sandbox(ctx.execution_dir)
    resolved = sandbox.resolve(raw, tool)
    if resolved.is_dir:
        raise InvalidArgs(tool, f"{resolved.rel!r} is a directory", "give a file path")
    sandbox.check_writable(resolved.rel, tool)
    return _Target(sandbox, resolved.rel, resolved.rel, True)


def _mutation_locks(ctx: ToolContext, raw: object) -> list[str]:
    if raw == PLAN_URI:
        return [f"path:{PLAN_URI}", FILE_MUTATION_KEY]
    return [Sandbox(ctx.execution_dir).lock_key(raw), FILE_MUTATION_KEY]


class WriteTool(ThreadTool):
    name = "write"
    description = (
        "Create or overwrite a file with the given content (parent folders are created). For a "
        "large file, write a first part and add the rest with edit."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the folder."},
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
    }
    mutates = True

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        return _mutation_locks(ctx, args.get("path"))

    def validate(self, args: dict[str, Any]) -> None:
        if not isinstance(args.get("content"), str):
            raise InvalidArgs(
                self.name,
                "missing field 'content'",
                "send the whole file text in 'content' (an empty string is allowed); for a "
                "large file write a first part, then append the rest with edit",
            )
        super().validate(args)

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        content = args["content"]
        target = _mutation_target(ctx, self.name, args.get("path"))
        shown, tracked = target.shown, target.tracked
        before = target.read()
        data = content.encode("utf-8")
        target.write(data, self.name)
        verb = "Created" if before is None else "Wrote"
        lines = len(split_lines(content))
        changes = []
        if tracked and before != data:
            op: FileOp = "create" if before is None else "update"
            changes.append(file_change(shown, op, before, data))
        return ToolOutput(
            content=f"{verb} {shown} ({len(data)} bytes, {lines} lines).", changes=changes
        )


_EDIT_ITEM = {
    "type": "object",
    "properties": {
        "old_text": {"type": "string", "description": "Exact text to replace (unique)."},
        "new_text": {"type": "string", "description": "Replacement text."},
        "all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
    },
    "required": ["old_text", "new_text"],
}


def apply_edits(text: str, edits: list[dict[str, Any]], shown: str, tool: str) -> str:
    """Apply replace-mode edits in order; any missing or ambiguous old_text fails them all."""
    crlf = "\r\n" in text
    for index, edit in enumerate(edits):
        old, new = edit.get("old_text"), edit.get("new_text")
        if not isinstance(old, str) or not isinstance(new, str):
            raise InvalidArgs(
                tool,
                f"edits[{index}] needs string 'old_text' and 'new_text'",
                "send each edit as {old_text, new_text, all?}",
            )
        if old == "":
            raise InvalidArgs(
                tool,
                f"edits[{index}].old_text is empty",
                "quote the exact text to replace, or use write to create the file",
            )
        count = text.count(old)
        if count == 0 and crlf and "\n" in old and "\r\n" not in old:
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise InvalidArgs(
                tool,
                f"edits[{index}].old_text was not found in {shown}",
                "read the file again and copy the exact text, including indentation; "
                "no edit was applied",
            )
        if count > 1 and not edit.get("all", False):
            raise InvalidArgs(
                tool,
                f"edits[{index}].old_text matches {count} places in {shown}",
                'include more surrounding lines to make it unique, or set "all": true; '
                "no edit was applied",
            )
        text = text.replace(old, new) if edit.get("all", False) else text.replace(old, new, 1)
    return text


class EditTool(ThreadTool):
    name = "edit"
    description = (
        "Change part of an existing file: each edit replaces one exact, unique 'old_text' with "
        "'new_text' (or every occurrence with all=true). Edits apply in order and all or none."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the folder."},
            "edits": {"type": "array", "items": _EDIT_ITEM, "minItems": 1},
        },
        "required": ["path", "edits"],
    }
    mutates = True

    def validate(self, args: dict[str, Any]) -> None:
        if "input" in args and "edits" not in args:
            raise InvalidArgs(
                self.name,
                "hashline mode ('input') is not supported on this worker",
                "send 'path' and 'edits': [{old_text, new_text}], or use apply_patch",
            )
        super().validate(args)

    def lock_keys(self, ctx: ToolContext, args: dict[str, Any]) -> list[str]:
        return _mutation_locks(ctx, args.get("path"))

    def run_sync(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        target = _mutation_target(ctx, self.name, args.get("path"))
        shown, tracked = target.shown, target.tracked
        before = target.read()
        if before is None:
            raise NotFound(f"{shown!r} does not exist", "create it with write first")
        if is_binary(before):
            raise Failed(f"{shown} is a binary file — edit only changes text files")
        after_text = apply_edits(decode(before), list(args["edits"]), shown, self.name)
        after = after_text.encode("utf-8")
        if after == before:
            return ToolOutput(
                content=f"{shown} is unchanged (the edits replaced text with itself)."
            )
        target.write(after, self.name)
        summary = diff_summary(before, after) or "no line changes"
        changes = [file_change(shown, "update", before, after)] if tracked else []
        count = len(args["edits"])
        return ToolOutput(
            content=f"Edited {shown}: {count} edit{'s' if count != 1 else ''} applied ({summary}).",
            changes=changes,
        )


__all__ = ["EditTool", "WriteTool", "apply_edits"]
