"""The gate in front of every signal, update and query of `OpenFlowRun`.

Anyone who can reach the workflow can send it anything: `temporal workflow signal` with no
input, a script with a typo, an old client. A signal handler that raises fails the run, so the
handlers here take their arguments raw (`*args`: the SDK then decodes JSON without a type to
fit it into, which cannot fail for a JSON payload) and read them themselves:

- a signal whose payload does not parse, or that comes with other than one argument, becomes
  an `ActionMalformed` fact: the engine records it as an ignored action and nothing else
  changes. Nothing in a signal handler raises.
- the `act` update reads its payload in its validator, which rejects it with the reason.
- a query with arguments it does not take answers its caller an error; the run is untouched.

A payload whose encoding is not JSON never reaches a handler: the SDK drops it, with a warning
in the worker's log, before any workflow code runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from openflow import contracts as c
    from openflow.engine.state import ActionMalformed
    from openflow.workflows import patches

ActionKind = Literal[
    "input", "approval", "retry", "message", "interrupt", "revert", "budget", "revoke_grant"
]

# Signals recorded before required fields were checked applied an action without them.
REQUIRED_FIELDS_PATCH = "signal-required-fields"


class _Spec:
    """What one action signal carries: its action kind, its required and optional fields."""

    def __init__(self, kind: ActionKind, required: tuple[str, ...], optional: tuple[str, ...]):
        self.kind = kind
        self.required = required
        self.optional = optional

    @property
    def shape(self) -> str:
        fields = [*self.required, *(f"{name}?" for name in self.optional)]
        return "{" + ", ".join(fields) + "}"


SIGNALS: dict[str, _Spec] = {
    c.SIGNAL_INPUT: _Spec("input", ("node_id", "text"), ()),
    c.SIGNAL_APPROVAL: _Spec(
        "approval", ("approval_id", "allow"), ("reason", "decisions", "remember", "by")
    ),
    c.SIGNAL_RETRY: _Spec("retry", ("node_id",), ("message",)),
    c.SIGNAL_MESSAGE: _Spec("message", ("node_id", "text"), ()),
    c.SIGNAL_INTERRUPT: _Spec("interrupt", ("node_id",), ()),
}
ACTS: dict[str, _Spec] = {spec.kind: spec for spec in SIGNALS.values()}
#: Revert is an update only: its caller waits for the files to be restored (or not).
ACTS["revert"] = _Spec("revert", ("batch_id",), ())
# A budget is set through `act` only; the engine's check wants one of its fields.
ACTS["budget"] = _Spec("budget", (), ("max_cost_usd", "max_tokens"))
#: Kinds only the `act` update takes.
ACTS["revoke_grant"] = _Spec("revoke_grant", ("tool",), ("path_prefix", "by"))


class Malformed(Exception):
    """A payload that is not the action it should be; `legacy` is what older code applied."""

    def __init__(self, reason: str, payload: str, legacy: c.Action | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.payload = payload
        self.legacy = legacy


def describe(value: Any) -> str:
    """What a payload is, by shape only: never its text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return f"text of {len(value)} characters"
    if isinstance(value, list | tuple):
        return f"list of {len(value)}"
    if isinstance(value, Mapping):
        keys = [str(k) for k in value][:8]
        inner = ", ".join(f"{k[:40]}: {_kind(value[k])}" for k in keys)
        more = ", ..." if len(value) > len(keys) else ""
        return "object {" + inner + more + "}"
    return type(value).__name__


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "list"
    return describe(value).split(" ", 1)[0]


def _errors(exc: ValidationError) -> str:
    """A validation error's first problems, with field names and no input values."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False)[:3]:
        msg = error["msg"].removeprefix("Value error, ")
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


def _one_object(args: tuple[Any, ...], what: str, shape: str) -> dict[str, Any]:
    expected = f"{what} takes one JSON object {shape}"
    if not args:
        raise Malformed(f"{expected}; it came with no payload", "no payload")
    if len(args) > 1:
        raise Malformed(f"{expected}; it came with {len(args)} arguments", f"{len(args)} arguments")
    payload = args[0]
    if not isinstance(payload, dict):
        raise Malformed(f"{expected}; it came with {describe(payload)}", describe(payload))
    return payload


def _missing(action: c.Action, required: tuple[str, ...]) -> list[str]:
    """The required fields the action leaves out; per-call decisions stand in for `allow`."""
    missing = [k for k in required if getattr(action, k) is None]
    if action.kind == "approval" and action.decisions:
        missing = [k for k in missing if k != "allow"]
    return missing


def read_signal(name: str, args: tuple[Any, ...]) -> c.Action:
    """The action a signal carries; `Malformed` says why there is none."""
    spec = SIGNALS[name]
    payload = _one_object(args, name, spec.shape)
    fields = {k: payload[k] for k in (*spec.required, *spec.optional) if k in payload}
    try:
        action = c.Action(kind=spec.kind, **fields)
    except ValidationError as exc:
        raise Malformed(_errors(exc), describe(payload)) from None
    missing = _missing(action, spec.required)
    if missing:
        reason = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required"
        raise Malformed(f"{name}: {reason}", describe(payload), legacy=action)
    return action


def read_act(args: tuple[Any, ...]) -> c.Action:
    """The action an `act` update carries; `Malformed` says why there is none."""
    payload = _one_object(args, c.UPDATE_ACT, "{kind, ...}")
    kinds = get_args(c.Action.model_fields["kind"].annotation)
    if payload.get("kind") not in kinds:
        raise Malformed(f"kind must be one of {', '.join(kinds)}", describe(payload))
    try:
        action = c.Action.model_validate(payload)
    except ValidationError as exc:
        raise Malformed(_errors(exc), describe(payload)) from None
    spec = ACTS.get(action.kind)
    required = spec.required if spec is not None else ()
    missing = _missing(action, required)
    if missing:
        raise Malformed(f"an {action.kind} action needs {', '.join(missing)}", describe(payload))
    return action


W = TypeVar("W")


def action_signal(name: str) -> Callable[[Callable[[W, c.Action], None]], Callable[..., None]]:
    """Register `apply` as the signal `name`, behind a gate that never raises.

    A payload that does not parse goes to the workflow's `_ignore` as an `ActionMalformed`
    fact, for the engine to record; a well-formed action goes to `apply`.
    """
    spec = SIGNALS[name]

    def decorate(apply: Callable[[W, c.Action], None]) -> Callable[..., None]:
        def handler(self: W, *args: Any) -> None:
            def ignore(reason: str, payload: str) -> None:
                fact = ActionMalformed(
                    signal=name, action=spec.kind, reason=reason, payload=payload
                )
                self._ignore(fact)  # type: ignore[attr-defined]

            try:
                action = read_signal(name, args)
            except Malformed as bad:
                if bad.legacy is None or patches.on(REQUIRED_FIELDS_PATCH):
                    ignore(bad.reason, bad.payload)
                    return
                action = bad.legacy
            try:
                apply(self, action)
            except Exception as exc:  # noqa: BLE001 - a handler must never fail the run
                ignore(f"{name} could not be applied ({type(exc).__name__})", describe(args[0]))

        handler.__name__ = apply.__name__
        handler.__qualname__ = apply.__qualname__
        handler.__doc__ = apply.__doc__
        handler.__openflow_gated__ = True  # type: ignore[attr-defined]
        return workflow.signal(name=name)(handler)

    return decorate


def plain_query(name: str) -> Callable[[Callable[[W], Any]], Callable[..., Any]]:
    """Register `answer` as the query `name`, which takes no argument."""

    def decorate(answer: Callable[[W], Any]) -> Callable[..., Any]:
        def handler(self: W, *args: Any) -> Any:
            if args:
                raise ValueError(f"the {name!r} query takes no argument")
            return answer(self)

        handler.__name__ = answer.__name__
        handler.__qualname__ = answer.__qualname__
        handler.__doc__ = answer.__doc__
        return workflow.query(name=name)(handler)

    return decorate


def read_after(args: tuple[Any, ...]) -> int:
    """The `after` of an `events` query: `{"after": N}` (or nothing) with N a whole number."""
    usage = 'the events query takes {"after": N} with N a whole number'
    if not args:
        return 0
    if len(args) > 1:
        raise ValueError(f"{usage}; it came with {len(args)} arguments")
    query = args[0]
    if query is None:
        return 0
    if not isinstance(query, dict):
        raise ValueError(f"{usage}; it came with {describe(query)}")
    after = query.get("after", 0)
    if after is None:
        return 0
    if isinstance(after, bool) or not isinstance(after, int):
        raise ValueError(f"{usage}; after is {describe(after)}")
    return after


__all__ = [
    "ACTS",
    "REQUIRED_FIELDS_PATCH",
    "SIGNALS",
    "Malformed",
    "action_signal",
    "describe",
    "plain_query",
    "read_act",
    "read_after",
    "read_signal",
]
