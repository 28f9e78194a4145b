"""Chaos scenario: malformed signals, `act` updates and queries, generated with hypothesis.

Payloads come from hypothesis strategies drawn with the campaign's seed, so a failure names the
payload that caused it and the same seed draws the same payloads again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from bench.chaos import (
    Campaign,
    Plan,
    Tally,
    make_workflow,
)
from openflow.client import parse_events, parse_state
from openflow.engine import RunEvent
from openflow.engine.events import ActionIgnored
from openflow.testing import agent_node

SIGNAL_FIELDS = {
    "submit_user_input": ["node_id", "text"],
    "submit_tool_approval": ["approval_id", "allow", "reason", "decisions", "remember", "by"],
    "retry_node": ["node_id", "message"],
    "send_message": ["node_id", "text"],
}
ACT_FIELDS = ["node_id", "text", "approval_id", "allow", "reason", "message", "decisions"]
QUERIES = ["state", "events", "checkpoint", "events_origin"]
ASK = "s_ask"

# --- payloads -------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value: what a script, an old client or `temporal workflow signal --input` can send."""


def shaped(fields: list[str], **extra: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Objects with the handler's own field names holding any JSON value, or any value at all."""
    optional: dict[str, st.SearchStrategy[Any]] = {f: JSON_VALUES for f in fields}
    optional.update(extra)
    return st.fixed_dictionaries({}, optional=optional) | JSON_VALUES


def arguments(one: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """No argument, one, or two: what arrives when a caller gets the arity wrong."""
    return st.one_of(st.tuples(one).map(list), st.just([]), st.tuples(one, one).map(list))


def draw(strategy: st.SearchStrategy[Any], count: int, seed: int) -> list[Any]:
    """`count` distinct examples of `strategy`, the same ones for the same seed."""
    drawn: dict[str, Any] = {}

    @settings(
        max_examples=count * 3,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def collect(value: Any) -> None:
        if len(drawn) < count:
            drawn.setdefault(json.dumps(value, sort_keys=True, default=str), value)

    collect()
    return list(drawn.values())


def brief(value: Any, limit: int = 90) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- signals, updates, queries --------------------------------------------------------------


async def _ask_run(campaign: Campaign, profile: str) -> tuple[str, WorkflowHandle[Any, Any]]:
    wf = make_workflow("signals", [agent_node(ASK, requestUserInput=True)])
    run_id = await campaign.start(wf, profile, campaign.folder("signals"))
    if not await campaign.wait_state(run_id, lambda s: s.awaiting_node_ids == [ASK]):
        raise RuntimeError(f"run {run_id} never paused for input")
    return run_id, campaign.client.get_workflow_handle(run_id)


def _ignored_markers(events: list[RunEvent]) -> list[str]:
    """The ActionIgnored events in order: the marker's node id, or "" for any other action."""
    out = []
    for event in events:
        if isinstance(event, ActionIgnored):
            node = event.action.get("node_id")
            out.append(node if isinstance(node, str) and node.startswith("marker-") else "")
    return out


async def _synced(
    campaign: Campaign, handle: WorkflowHandle[Any, Any], marker: str, deadline: float = 20.0
) -> tuple[bool, list[str]]:
    """Send a marker signal (ignored by design) and wait until the run has recorded it.

    Signals are applied in order, so once the marker shows, everything sent before it was
    handled. Returns whether the run is still live, and the ignored actions seen so far.
    """
    try:
        await handle.signal("retry_node", {"node_id": marker})
    except Exception:  # noqa: BLE001 - the run may have ended already
        return False, []
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not await _running(handle):
            return False, []
        try:
            events = parse_events(await handle.query("events", {"after": 0}, result_type=list))
        except Exception:  # noqa: BLE001 - a failed query on a live run: try again
            events = []
        markers = _ignored_markers(events)
        if marker in markers:
            # A handler that raised fails the workflow task that applied the marker too: look
            # again once that task has settled.
            with contextlib.suppress(Exception):  # a failed run may not answer
                await handle.query("state", result_type=dict)
            return await _running(handle), markers
        await asyncio.sleep(0.05)
    return await _running(handle), []


async def _running(handle: WorkflowHandle[Any, Any]) -> bool:
    from temporalio.client import WorkflowExecutionStatus

    try:
        return (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    except Exception:  # noqa: BLE001
        return False


async def _finish(campaign: Campaign, tally: Tally, run_id: str, what: str) -> None:
    """One valid answer must still complete the run."""
    from openflow.contracts import Action

    try:
        await campaign.runs.act(run_id, Action(kind="input", node_id=ASK, text="valid answer"))
        status = await campaign.settle(run_id)
    except Exception as exc:  # noqa: BLE001 - a run that cannot take a valid answer
        status = f"refused a valid answer: {exc}"
    tally.record(status == "completed", f"{what}: after the flood the run {status}")


async def signal_flood(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Malformed payloads for every signal, the `act` update and every query, on live runs."""
    await campaign.ensure_worker()
    profile = campaign.profile(
        "signals", {ASK: [{"ask": "Go on?"}, {"submit": {"summary": "answered"}}]}
    )
    seed = campaign.seed or 0
    signals = Tally("malformed signals")
    updates = Tally("malformed act updates")
    queries = Tally("malformed queries")
    markers = 0

    for name, fields in SIGNAL_FIELDS.items():
        run_id, handle = await _ask_run(campaign, profile)
        seen = 0
        for args in draw(arguments(shaped(fields)), plan.payloads, seed + len(name)):
            try:
                await handle.signal(name, args=args)
            except Exception as exc:  # noqa: BLE001 - refused by the client: nothing was sent
                signals.record(True, f"{name} {brief(args)}: not sent ({type(exc).__name__})")
                continue
            markers += 1
            live, ignored = await _synced(campaign, handle, f"marker-{markers}")
            if not live:
                signals.record(False, f"{name} {brief(args)}: the run ended (failed or stuck)")
                run_id, handle = await _ask_run(campaign, profile)
                seen = 0
                continue
            recorded = len(ignored) - seen - 1
            seen = len(ignored)
            signals.record(recorded == 1, f"{name} {brief(args)}: not recorded as ignored")
        await _finish(campaign, signals, run_id, name)

    act_values = shaped(
        ACT_FIELDS,
        kind=st.sampled_from(["input", "approval", "retry", "message", "stop"]) | JSON_VALUES,
    )
    run_id, handle = await _ask_run(campaign, profile)
    for args in draw(arguments(act_values), plan.payloads * 2, seed + 1):
        accepted = False
        try:
            await handle.execute_update("act", args=args)
            accepted = True
        except WorkflowUpdateFailedError:
            pass
        except Exception:  # noqa: BLE001 - refused before the run (RPC, conversion): fine
            pass
        markers += 1
        live, _ = await _synced(campaign, handle, f"marker-{markers}")
        if not live:
            updates.record(False, f"act {brief(args)}: the run ended (failed or stuck)")
            run_id, handle = await _ask_run(campaign, profile)
            continue
        updates.record(not accepted, f"act {brief(args)}: accepted a malformed action")
    await _finish(campaign, updates, run_id, "act")

    run_id, handle = await _ask_run(campaign, profile)
    for name in QUERIES:
        fields = ["after"] if name == "events" else []
        for args in draw(arguments(shaped(fields)), plan.payloads, seed + 7 * len(name)):
            with contextlib.suppress(Exception):  # an error to the caller is the right answer
                await handle.query(name, args=args)
            live = await _running(handle)
            try:
                state = parse_state(await handle.query("state", result_type=dict))
            except Exception:  # noqa: BLE001 - not answering, or not a state: harmed
                state = None
            ok = live and state is not None and state.awaiting_node_ids == [ASK]
            queries.record(ok, f"{name} {brief(args)}: the run was harmed")
            if not ok:
                run_id, handle = await _ask_run(campaign, profile)
    await _finish(campaign, queries, run_id, "queries")
    return [signals, updates, queries]
