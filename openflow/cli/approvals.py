"""`openflow runs approve|deny` options as one approval action: the batch, or call by call.

    openflow runs approve ID APPROVAL                       every call approved
    openflow runs approve ID APPROVAL --deny-call c2=why    every call but c2 approved
    openflow runs approve ID APPROVAL --call c1             only c1 approved, the rest denied
    openflow runs deny ID APPROVAL --call c1 --reason why   the same, the rest denied "why"
    openflow runs approve ID APPROVAL --edit c1 '{"path": "docs/a.md"}'

`--edit` approves its call with those arguments; `--reason` is the reason of every denied call
that has none of its own; `--remember write:docs/` approves later `write` calls under `docs/`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

from openflow import contracts as c
from openflow.cli.common import BadInput
from openflow.engine.errors import LimitExceeded
from openflow.engine.limits import check_message


def approval_action(args: argparse.Namespace) -> c.Action:
    """The action the options name; BadInput (one line) says what to fix."""
    decisions: dict[str, dict[str, Any]] = {}
    option: dict[str, str] = {}

    def decide(call_id: str, where: str, **decision: Any) -> None:
        if not call_id.strip():
            raise BadInput(f"{where}: give a call id (see `openflow runs show ID`)")
        if call_id in decisions:
            if option[call_id] == where and {"call_id": call_id, **decision} == decisions[call_id]:
                return
            raise BadInput(
                f"call {call_id!r} is decided twice ({option[call_id]} and {where}); "
                "give each call one decision"
            )
        decisions[call_id] = {"call_id": call_id, **decision}
        option[call_id] = where

    for call_id in args.call:
        decide(call_id, "--call", allow=True)
    for call_id, text in args.edit:
        decide(call_id, "--edit", allow=True, arguments=_arguments(call_id, text))
    for spec in args.deny_call:
        call_id, sep, reason = spec.partition("=")
        try:
            check_message(reason, "the reason")
        except LimitExceeded as exc:
            raise BadInput(f"--deny-call {call_id}: {exc}") from None
        decide(call_id, "--deny-call", allow=False, **({"reason": reason} if sep else {}))
    allow = args.allow and not args.call
    try:
        return c.Action(
            kind="approval",
            approval_id=args.approval_id,
            allow=allow,
            reason=args.reason,
            decisions=list(decisions.values()),
            remember=_grant(args.remember) if args.remember is not None else None,
            by=args.by,
        )
    except ValidationError as exc:
        error = exc.errors(include_input=False, include_url=False)[0]
        where = _option(error["loc"])
        raise BadInput(f"{where}: {error['msg'].removeprefix('Value error, ')}") from None


def _arguments(call_id: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"--edit {call_id}: the arguments are not JSON ({exc.msg} at character {exc.pos}); "
            'give a JSON object such as \'{"path": "a.txt"}\''
        ) from None
    if not isinstance(value, dict):
        raise BadInput(f"--edit {call_id}: give the arguments as a JSON object, not {text[:40]!r}")
    return value


def _grant(text: str, where: str = "--remember") -> dict[str, Any]:
    tool, sep, prefix = text.partition(":")
    if not tool.strip():
        raise BadInput(f"{where}: give a tool name, as TOOL or TOOL:PATH_PREFIX")
    if sep and not prefix.strip():
        raise BadInput(
            f"{where}: the path prefix after {tool + ':'!r} is empty; give one or leave out the ':'"
        )
    return {"tool": tool, **({"path_prefix": prefix} if sep else {})}


def revoke_action(args: argparse.Namespace) -> c.Action:
    """`runs revoke ID TOOL[:PATH_PREFIX]` as a `revoke_grant` action; BadInput says what to fix."""
    try:
        return c.Action(kind="revoke_grant", **_grant(args.grant, "TOOL"), by=args.by)
    except ValidationError as exc:
        error = exc.errors(include_input=False, include_url=False)[0]
        where = "--by" if error["loc"] and error["loc"][0] == "by" else "TOOL"
        raise BadInput(f"{where}: {error['msg'].removeprefix('Value error, ')}") from None


def _option(loc: tuple[int | str, ...]) -> str:
    """The command-line option a validation error's location comes from."""
    head = str(loc[0]) if loc else ""
    if head == "decisions":
        return "--call/--deny-call/--edit"
    return {"by": "--by", "remember": "--remember", "reason": "--reason"}.get(head, "APPROVAL")


__all__ = ["approval_action", "revoke_action"]
