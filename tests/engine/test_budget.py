"""Budgets on the pure engine: no model call once the run has spent its budget, and raising it
lets the paused node go on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from openflow.engine import advance as engine
from openflow.engine.budget import reached
from openflow.engine.errors import WorkflowFormatError
from openflow.engine.projection import initial_state, project
from openflow.engine.request import ModelReply, UsageReport
from openflow.engine.spec import Budget, Workflow
from openflow.engine.state import BudgetSet, Plan, RetryRequested, RunSnapshot
from tests.engine.driver import Driver, agent_node, call, ok_summary, tools, workflow
from tests.engine.test_subagents import SCOUT, declare, invoke


def costing(reply: ModelReply, usd: float, tokens: int = 100) -> ModelReply:
    usage = UsageReport(prompt_tokens=tokens, completion_tokens=10, cost_usd=usd)
    return reply.model_copy(update={"usage": usage})


def read_turn(usd: float) -> ModelReply:
    return costing(tools(call("read", {"path": "a.txt"})), usd)


@dataclass
class BudgetDriver(Driver):
    """The engine driver with a run's own budget passed to `start`."""

    budget: Budget | None = None

    def start(self) -> Plan:
        plan = engine.start(
            self.wf,
            "run-test",
            self.now,
            entrypoint_text=self.entrypoint,
            tool_names=self.tool_names,
            budget=self.budget,
        )
        self.take(plan)
        return plan


def one_node(**settings: Any) -> Workflow:
    return workflow([agent_node("first", tools={"approvalMode": "yolo"})], **settings)


def state(d: Driver) -> Any:
    ids = [n.id for n in d.wf.nodes]
    return project(d.events, initial_state(d.wf.id, "run-test", ids, None))


def test_a_spent_budget_pauses_the_node_and_raising_it_goes_on() -> None:
    wf = one_node(budget={"maxCostUsd": 0.01})
    script = {"first": [read_turn(0.006), read_turn(0.006), costing(ok_summary(), 0.001)]}
    d = BudgetDriver(wf, script).run()
    # Two calls went out: the second crossed the budget, so the third waits.
    assert len(d.model.requests("first")) == 2
    assert d.snapshot.status == "paused"
    error = d.node("first").failed
    assert error is not None and error.startswith("budget reached: $0.0120 of $0.0100 spent")
    assert "openflow runs budget run-test --max-cost USD" in error
    assert d.plan is not None and d.plan.awaiting.retryables == ("first",)
    view = state(d)
    assert view.status_by_node["first"] == "failed" and "budget" in (view.last_error or "")
    # A retry while still over the budget pauses it again, with no call sent.
    d.feed(RetryRequested(node_id="first"))
    assert len(d.model.requests("first")) == 2 and d.node("first").failed is not None
    # Raising it is enough: the node goes on without a retry of its own.
    d.feed(BudgetSet(max_cost_usd=0.05))
    assert d.node("first").failed is None
    d.run()
    assert d.snapshot.status == "completed"
    assert len(d.model.requests("first")) == 3
    assert d.snapshot.budget == Budget(max_cost_usd=0.05)
    assert state(d).status_by_node["first"] == "completed"


def test_a_raise_still_under_what_is_spent_keeps_the_pause() -> None:
    wf = one_node(budget={"maxCostUsd": 0.01})
    d = BudgetDriver(wf, {"first": [read_turn(0.02), costing(ok_summary(), 0.0)]}).run()
    assert d.snapshot.status == "paused"
    d.feed(BudgetSet(max_cost_usd=0.015))
    assert d.node("first").failed is not None and d.snapshot.status == "paused"
    d.feed(BudgetSet(max_cost_usd=1.0))
    assert d.run().snapshot.status == "completed"


def test_the_runs_budget_overrides_the_workflows_field_by_field() -> None:
    wf = one_node(budget={"maxCostUsd": 0.01, "maxTokens": 1_000_000})
    run_budget = Budget(max_cost_usd=1.0)
    d = BudgetDriver(
        wf, {"first": [read_turn(0.02), costing(ok_summary(), 0.0)]}, budget=run_budget
    )
    d.run()
    assert d.snapshot.status == "completed"
    assert d.snapshot.budget == Budget(max_cost_usd=1.0, max_tokens=1_000_000)
    # The workflow's token limit still holds.
    tight = BudgetDriver(
        one_node(budget={"maxCostUsd": 1.0}),
        {"first": [read_turn(0.0), costing(ok_summary(), 0.0)]},
        budget=Budget(max_tokens=50),
    ).run()
    error = tight.node("first").failed
    assert error is not None and "110 of 50 tokens spent" in error and "--max-tokens N" in error


def test_subagent_calls_count_toward_it_and_a_held_subagent_goes_on_after_a_raise() -> None:
    wf = one_node(budget={"maxCostUsd": 0.01})
    script = {
        "first": [costing(declare(("scout", "Find files.")), 0.001), invoke(SCOUT)],
        SCOUT: [read_turn(0.02), costing(ok_summary("found"), 0.0)],
    }
    d = BudgetDriver(wf, script).run()
    first = d.node("first")
    # The subagent's own call spent it: its next call waits, and its node pauses for it.
    assert d.snapshot.status == "paused"
    assert first.failed is not None and "budget" in first.failed and first.child is not None
    assert len([c for c in d.model.calls if c.node_id == SCOUT]) == 1
    assert reached(d.snapshot) is not None
    d.model.add("first", ok_summary("done"))
    d.feed(BudgetSet(max_cost_usd=0.5))
    d.run()
    assert d.snapshot.status == "completed"
    assert d.snapshot.nodes["first"].output == {"summary": "done"}
    assert len([c for c in d.model.calls if c.node_id == SCOUT]) == 2


def test_a_spent_budget_skips_the_review_and_the_run_completes() -> None:
    wf = one_node(budget={"maxCostUsd": 0.001})
    d = BudgetDriver(wf, {"first": [costing(ok_summary(), 0.002)]}).run()
    assert d.snapshot.status == "completed"
    assert d.model.reviews == []
    assert d.snapshot.suggestions_error is not None and "budget" in d.snapshot.suggestions_error


def test_other_nodes_go_on_until_their_own_next_call() -> None:
    wf = workflow(
        [agent_node("a", tools={"approvalMode": "yolo"}), agent_node("b")],
        budget={"maxCostUsd": 0.01},
    )
    d = BudgetDriver(wf, {"a": [read_turn(0.02)], "b": [costing(ok_summary(), 0.0)]})
    d.hold("model:b")
    d.run()
    # a's call spent the budget; b's call already in flight still lands and b completes.
    d.release("model:b")
    d.run()
    assert d.node("b").has_output
    assert d.node("a").failed is not None and d.snapshot.status == "paused"


def test_a_budget_action_is_checked() -> None:
    d = BudgetDriver(one_node(), {"first": [costing(ok_summary(), 0.0)]})
    d.start()
    assert engine.check(d.snapshot, BudgetSet()) == (
        "a budget action needs max_cost_usd or max_tokens"
    )
    bad = engine.check(d.snapshot, BudgetSet(max_cost_usd=-1.0))
    assert bad is not None and "max_cost_usd" in bad
    assert engine.check(d.snapshot, BudgetSet(max_tokens=10)) is None
    d.feed(BudgetSet(max_cost_usd=-1.0))
    assert d.snapshot.budget is None
    assert d.of_type("ActionIgnored")


@pytest.mark.parametrize(
    ("budget", "field"),
    [
        ({"maxCostUsd": -1}, "settings.budget.maxCostUsd"),
        ({"maxCostUsd": "x"}, "settings.budget.maxCostUsd"),
        ({"maxTokens": 0}, "settings.budget.maxTokens"),
        ({"maxTokens": 1.5}, "settings.budget.maxTokens"),
        ({"maxDollars": 1}, "settings.budget.maxDollars"),
    ],
)
def test_a_bad_workflow_budget_names_its_field(budget: Any, field: str) -> None:
    data = one_node().to_json_dict()
    data["settings"]["budget"] = budget
    with pytest.raises(WorkflowFormatError, match=field):
        Workflow.from_json_dict(data)


def test_the_budget_setting_is_written_only_when_set() -> None:
    assert "budget" not in one_node().to_json_dict()["settings"]
    data = one_node(budget={"maxTokens": 5}).to_json_dict()
    assert data["settings"]["budget"] == {"maxTokens": 5}


def test_a_budget_pause_survives_the_snapshots_json_and_a_raise_still_goes_on() -> None:
    wf = one_node(budget={"maxCostUsd": 0.01})
    script = {"first": [read_turn(0.006), read_turn(0.006), costing(ok_summary(), 0.001)]}
    d = BudgetDriver(wf, script).run()
    assert d.snapshot.status == "paused"
    # A run that continues as new, or restarts from a checkpoint, carries its snapshot as JSON.
    carried = RunSnapshot.model_validate_json(d.snapshot.model_dump_json())
    assert carried == d.snapshot
    d.resume(carried)
    assert d.snapshot.status == "paused" and d.node("first").failed is not None
    d.feed(BudgetSet(max_cost_usd=0.05))
    assert d.node("first").failed is None
    assert d.run().snapshot.status == "completed"
    assert len(d.model.requests("first")) == 3
