"""OpenFlow's semantics for people's actions and MCP context, on the pure engine."""

from __future__ import annotations

from typing import Any

from openflow.engine import advance as engine
from openflow.engine.build import build_request
from openflow.engine.prompts import MCP_CONTEXT_MARKER
from openflow.engine.state import InputGiven, MessageSent
from openflow.engine.step import Step
from tests.engine.driver import Driver, agent_node, ok_summary, permanent, workflow


def failed_driver() -> Driver:
    driver = Driver(workflow([agent_node("a")]), script={"a": [permanent(), ok_summary("again")]})
    driver.run()
    assert driver.node("a").failed is not None
    return driver


def test_an_input_to_a_failed_node_retries_it_with_the_input_as_its_message() -> None:
    driver = failed_driver()
    fact = InputGiven(node_id="a", text="try again, smaller")
    assert engine.check(driver.snapshot, fact) is None
    driver.feed(fact)
    driver.run()
    assert driver.node("a").output == {"summary": "again"}
    [call] = driver.model.requests("a")[-1:]
    assert any(getattr(i, "content", "") == "try again, smaller" for i in call.transcript)


def test_runs_recorded_before_keep_ignoring_an_input_to_a_failed_node() -> None:
    driver = failed_driver()
    old = InputGiven(node_id="a", text="x", retry_failed=False)
    assert engine.check(driver.snapshot, old) == "no node is waiting for input"
    driver.feed(old)
    assert driver.node("a").failed is not None and driver.of_type("ActionIgnored")


def live_message_run(deliver_late: bool) -> Driver:
    driver = Driver(
        workflow([agent_node("a", requestUserInput=True)]),
        script={"a": [ok_summary("first"), ok_summary("second")]},
    )
    driver.start()
    # The node's only call is in flight when the message arrives; its reply submits.
    driver.feed(MessageSent(node_id="a", text="add the budget", deliver_late=deliver_late))
    driver.run()
    return driver


def test_a_message_taken_during_the_last_turn_gets_a_turn_of_its_own() -> None:
    driver = live_message_run(deliver_late=True)
    assert driver.node("a").output == {"summary": "second"}
    last = driver.model.requests("a")[-1]
    assert [getattr(i, "content", "") for i in last.transcript][-1] == "add the budget"


def test_runs_recorded_before_keep_the_submit_that_won() -> None:
    assert live_message_run(deliver_late=False).node("a").output == {"summary": "first"}


def mcp_workflow(snapshots: list[dict[str, Any]]) -> Any:
    return workflow([agent_node("a", mcpContextSnapshots=snapshots), agent_node("b")])


def test_mcp_snapshots_are_the_last_system_message_and_failures_are_told_in_the_chat() -> None:
    wf = mcp_workflow(
        [
            {"kind": "resource", "serverId": "notes", "source": "notes://team", "content": "Hi"},
            {
                "kind": "resource",
                "serverId": "gone",
                "source": "x://1",
                "error": "MCP server "
                "'gone' was skipped: it could not be set up (its command was not found)",
            },
            {
                "kind": "prompt",
                "serverId": "gone",
                "source": "p",
                "error": "MCP server "
                "'gone' was skipped: it could not be set up (its command was not found)",
            },
        ]
    )
    plan = engine.start(wf, "run-1", 0, warnings=["ignored MCP server 'x': it failed"])
    told = [(e.node_id, e.content) for e in plan.events if e.type == "ChatMessage"]
    assert told == [
        ("a", "Skipped MCP server 'x': it failed"),
        ("a", "MCP server 'gone' was skipped: it could not be set up (its command was not found)"),
    ]
    request = build_request(Step(plan.snapshot, 0), "a")
    assert request is not None
    block = request.system_messages[-1]
    assert block.startswith(MCP_CONTEXT_MARKER) and '"content": "Hi"' in block
    other = build_request(Step(plan.snapshot, 0), "b")
    assert other is not None and not any(MCP_CONTEXT_MARKER in m for m in other.system_messages)
