"""Limits on what comes from files and requests, and checks that never recurse.

Every entry point (the CLI, the HTTP API, the catalog, the run's `act` validator and signals)
checks against the same named limits, so a hostile or careless input is refused with one line
that names the limit instead of reaching code that is not ready for it (a RecursionError deep in
a JSON parser or a schema validator, a payload Temporal refuses, a graph too large to run).

The depth checks walk with an explicit stack, so they work on any input: a document is measured
before it is parsed, and a parsed value before it is copied, dumped or checked as a schema.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from openflow.engine.errors import LimitExceeded


@dataclass(frozen=True)
class Limit:
    """One named limit: its value, its unit and what it applies to."""

    name: str
    value: int
    unit: str
    applies_to: str

    def message(self, what: str, found: int, fix: str, verb: str = "is") -> str:
        """`what` is `found` units, over the limit: one line that names the limit and the fix."""
        return (
            f"{what} {verb} {found:,} {self.unit}, over the limit {self.name} "
            f"({self.value:,} {self.unit}) — {fix}"
        )

    def error(self, what: str, found: int, fix: str, verb: str = "is") -> LimitExceeded:
        """The LimitExceeded to raise for `what`."""
        return LimitExceeded(self.message(what, found, fix, verb), self.name, self.value, found)


MAX_JSON_DEPTH = Limit(
    "max_json_depth",
    128,
    "levels",
    "how deeply arrays and objects nest in a JSON file or request body (a workflow, the "
    "workflow store, agents.json, settings.json, an API body), and in a model's tool-call "
    "arguments",
)
MAX_SCHEMA_DEPTH = Limit(
    "max_schema_depth",
    64,
    "levels",
    "how deeply a node's or a saved agent's output_schema nests, and an MCP tool's input schema",
)
MAX_SCHEMA_BYTES = Limit(
    "max_schema_bytes",
    131_072,
    "bytes",
    "one output_schema (or MCP tool input schema) as compact JSON",
)
MAX_WORKFLOW_FILE_BYTES = Limit(
    "max_workflow_file_bytes",
    8_388_608,
    "bytes",
    "a workflow file on disk; a larger file is not read",
)
MAX_WORKFLOW_BYTES = Limit(
    "max_workflow_bytes",
    1_048_576,
    "bytes",
    "a workflow as compact JSON (what a run carries in Temporal history), not counting the "
    "MCP context resolved into it at run start, which has limits of its own",
)
MAX_NODES = Limit("max_nodes", 500, "nodes", "the nodes of one workflow")
MAX_EDGES = Limit("max_edges", 2_000, "edges", "the edges of one workflow")
MAX_ENTRYPOINT_BYTES = Limit(
    "max_entrypoint_bytes",
    262_144,
    "bytes",
    "a run's entrypoint text (UTF-8)",
)
MAX_MESSAGE_BYTES = Limit(
    "max_message_bytes",
    65_536,
    "bytes",
    "one text a person sends a run (UTF-8): an input answer, a live message, a retry message, "
    "an approval reason",
)
MAX_REQUEST_BYTES = Limit(
    "max_request_bytes",
    2_097_152,
    "bytes",
    "an HTTP request body (the API's default; `create_app(max_body_bytes=...)` changes it)",
)
MAX_ATTACHMENT_BYTES = Limit(
    "max_attachment_bytes",
    3_750_000,
    "bytes",
    "one file attached to an entrypoint or an input answer (the smallest image limit of the "
    "supported providers, Amazon Bedrock's 3.75 MB)",
)
MAX_ATTACHMENTS = Limit(
    "max_attachments",
    8,
    "files",
    "the files attached to one entrypoint or one input answer",
)

LIMITS: tuple[Limit, ...] = (
    MAX_JSON_DEPTH,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_BYTES,
    MAX_WORKFLOW_FILE_BYTES,
    MAX_WORKFLOW_BYTES,
    MAX_NODES,
    MAX_EDGES,
    MAX_ENTRYPOINT_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_REQUEST_BYTES,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
)

# A JSON string (possessive, so an unterminated one ends the scan instead of being retried at
# every quote inside it); what is left of the text outside strings cannot be inside one.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def text_depth(text: str | bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest, without parsing it.

    Strings are cut out and each bracket outside them becomes a step of +1 or -1 (signed
    bytes), whose highest running sum is the depth: all of it at C speed, in one pass. Text
    that is not JSON gets a number too (the parser that reads it afterwards says what is
    wrong), never less than the depth a parser would reach before finding out.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    steps = _STRING.sub(b"", data).translate(_STEPS, _NOT_BRACKETS)
    if not steps:
        return 0
    return max(0, max(accumulate(array("b", steps))))


def value_depth(value: Any, stop_above: int) -> int:
    """How deeply the dicts, lists and tuples of a value nest (a scalar is 0), iteratively.

    Stops as soon as the depth passes `stop_above`, so a cyclic value ends too.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > deepest:
            deepest = level
            if deepest > stop_above:
                return deepest
        stack.extend(
            (child, level + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return deepest


def utf8_len(text: str) -> int:
    """The UTF-8 size of a text (lone surrogates count as three bytes, as they would be sent)."""
    return len(text.encode("utf-8", errors="surrogatepass"))


def check_json_text(text: str | bytes, what: str) -> None:
    """Raise LimitExceeded when a JSON text nests deeper than max_json_depth."""
    depth = text_depth(text)
    if depth > MAX_JSON_DEPTH.value:
        fix = "flatten it; no OpenFlow file or request needs that much nesting"
        raise MAX_JSON_DEPTH.error(what, depth, fix, verb="nests")


def schema_limit_problem(schema: Any, what: str) -> tuple[Limit, str] | None:
    """The first schema limit `schema` breaks, with its one-line message, or None."""
    if value_depth(schema, MAX_SCHEMA_DEPTH.value) > MAX_SCHEMA_DEPTH.value:
        return MAX_SCHEMA_DEPTH, MAX_SCHEMA_DEPTH.message(
            what,
            value_depth(schema, MAX_JSON_DEPTH.value * 1000),
            "flatten the schema (a $ref to a definition can stand for a repeated part)",
            verb="nests",
        )
    try:
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        size = len(text.encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError):
        return None  # not JSON data: the schema rules say what is wrong with it
    if size > MAX_SCHEMA_BYTES.value:
        return MAX_SCHEMA_BYTES, MAX_SCHEMA_BYTES.message(
            what, size, "make the schema smaller (shorter descriptions, shared definitions)"
        )
    return None


def text_limit_problem(limit: Limit, text: str | None, what: str, fix: str) -> str | None:
    """Why `text` is over `limit` (a byte limit), or None."""
    if text is None or len(text) * 4 <= limit.value:
        return None  # no UTF-8 character is longer than four bytes
    size = utf8_len(text)
    if size <= limit.value:
        return None
    return limit.message(what, size, fix)


def check_entrypoint(text: str) -> None:
    """Raise LimitExceeded for an entrypoint over max_entrypoint_bytes."""
    size = utf8_len(text) if len(text) * 4 > MAX_ENTRYPOINT_BYTES.value else 0
    if size > MAX_ENTRYPOINT_BYTES.value:
        raise MAX_ENTRYPOINT_BYTES.error(
            "the entrypoint", size, "shorten it, or put the material in a file the run reads"
        )


def check_message(text: str | None, what: str) -> None:
    """Raise LimitExceeded for a person's text over max_message_bytes."""
    if text is None or len(text) * 4 <= MAX_MESSAGE_BYTES.value:
        return
    size = utf8_len(text)
    if size > MAX_MESSAGE_BYTES.value:
        raise MAX_MESSAGE_BYTES.error(what, size, "send a shorter text")


__all__ = [
    "LIMITS",
    "MAX_ATTACHMENTS",
    "MAX_ATTACHMENT_BYTES",
    "MAX_EDGES",
    "MAX_ENTRYPOINT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_MESSAGE_BYTES",
    "MAX_NODES",
    "MAX_REQUEST_BYTES",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "MAX_WORKFLOW_BYTES",
    "MAX_WORKFLOW_FILE_BYTES",
    "Limit",
    "LimitExceeded",
    "check_entrypoint",
    "check_json_text",
    "check_message",
    "schema_limit_problem",
    "text_depth",
    "text_limit_problem",
    "utf8_len",
    "value_depth",
]
