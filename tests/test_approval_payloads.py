"""Approval payloads, per call: old ones parse as before, each bad new field is named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from openflow import contracts as c
from openflow.workflows.handlers import Malformed, read_act, read_signal

OLD_PAYLOADS: list[dict[str, Any]] = [
    {"approval_id": "b1", "allow": True},
    {"approval_id": "b1", "allow": False, "reason": "not now"},
    # What clients before per-call approvals sent: every field of the action, nulls included.
    {
        "kind": "approval",
        "node_id": None,
        "text": None,
        "approval_id": "b1",
        "allow": False,
        "reason": "no",
        "message": None,
    },
]


@pytest.mark.parametrize("payload", OLD_PAYLOADS)
def test_old_payloads_parse_unchanged(payload: dict[str, Any]) -> None:
    action = read_signal(c.SIGNAL_APPROVAL, (payload,))
    assert (action.approval_id, action.allow) == ("b1", payload["allow"])
    assert action.reason == payload.get("reason")
    assert action.decisions == [] and action.remember is None and action.by is None
    assert read_act(({**payload, "kind": "approval"},)) == action


def test_new_fields_travel_and_stand_in_for_allow() -> None:
    payload = {
        "kind": "approval",
        "approval_id": "b1",
        "decisions": [
            {"call_id": "c1", "allow": True, "arguments": {"path": "docs/a.md"}},
            {"call_id": "c2", "allow": False, "reason": "no shell"},
        ],
        "remember": {"tool": "write", "path_prefix": "docs/"},
        "by": "Ada Lovelace",
    }
    action = read_act((payload,))
    assert action.allow is None
    assert action.decisions[0].arguments == {"path": "docs/a.md"}
    assert action.decision_for("c2") == (False, "no shell")
    assert action.decision_for("c3") == (None, None)
    assert action.remember == c.ToolGrant(tool="write", path_prefix="docs/")
    assert read_signal(c.SIGNAL_APPROVAL, (payload,)) == action
    # The same action through a JSON round trip, as Temporal carries it.
    assert c.Action.model_validate_json(action.model_dump_json()) == action


BAD = [
    ({"decisions": [{"allow": True}]}, "decisions.0.call_id: Field required"),
    ({"decisions": [{"call_id": "", "allow": True}]}, "decisions.0.call_id"),
    (
        {"decisions": [{"call_id": "c1", "allow": True}, {"call_id": "c1", "allow": False}]},
        "decisions: call 'c1' is decided twice",
    ),
    (
        {"decisions": [{"call_id": "c1", "allow": True, "arguments": ["rm"]}]},
        "decisions.0.arguments: Input should be a valid dictionary",
    ),
    (
        {"decisions": [{"call_id": "c1", "allow": False, "arguments": {}}]},
        "arguments: only an allowed call can be edited",
    ),
    ({"decisions": [{"call_id": "c1", "allow": True, "callId": "x"}]}, "decisions.0.callId"),
    ({"allow": True, "remember": {"path_prefix": "docs/"}}, "remember.tool: Field required"),
    ({"allow": True, "remember": {"tool": "write", "path_prefix": ""}}, "remember.path_prefix"),
    ({"allow": True, "by": "x" * (c.MAX_BY_CHARS + 1)}, "by: String should have at most 200"),
    ({"allow": True, "by": "Ada\nLovelace"}, "by: give a name of printable characters"),
    ({"reason": "no"}, "allow"),
]


@pytest.mark.parametrize(("fields", "named"), BAD)
def test_each_bad_field_is_named(fields: dict[str, Any], named: str) -> None:
    payload = {"kind": "approval", "approval_id": "b1", **fields}
    with pytest.raises(Malformed) as by_act:
        read_act((payload,))
    assert named in by_act.value.reason
    with pytest.raises(Malformed) as by_signal:
        read_signal(c.SIGNAL_APPROVAL, (payload,))
    assert named in by_signal.value.reason
    # The reason describes fields, never the text a person or model wrote.
    assert "Lovelace" not in by_act.value.reason and "'rm'" not in by_act.value.reason


def test_only_an_approval_carries_decisions() -> None:
    with pytest.raises(ValidationError, match="decisions: only an approval carries it"):
        c.Action(kind="input", node_id="n", text="t", decisions=[{"call_id": "c", "allow": True}])
