"""The run's budget: no model call goes out once the run has spent what it may.

A run's budget (`RunSnapshot.budget`) is the workflow's `settings.budget` with the run's own
(`openflow run --max-cost`, `POST /runs {budget}`) over it field by field. It counts what the
run has spent so far: the estimated cost and the input plus output tokens of every reply, a
node's, an output repair's, a subagent's and the post-run review's alike. The cost of a call is
known only once it has replied (the engine holds no price table and a reply's length is the
model's), so the check is made before each call on what is already spent: once the spent amount
reaches the budget, no further model call is dispatched. A run therefore stops at most one call
per running conversation past its budget, never more.

A conversation held by its budget (a node's own, or the subagent it runs: `hold`, the one check
both dispatchers make) puts its node in a retryable pause (`Failed` with `budget=True`) whose
error says "budget" and how to raise it; the rest of the run goes on as far as it can. Raising
the budget (`BudgetSet`, the `act` kind `budget`) retries at once every node it held that may
now call again, so a person raises it with one command; a `retry` of such a node while the run
is still over its budget pauses it again. A budget set lower than what is spent is taken and
holds the next call. Output repair is skipped and the post-run review ends without suggestions
when the budget is spent, since neither may pause a node.
"""

from __future__ import annotations

from pydantic import ValidationError

from openflow.engine.conversation import Seat
from openflow.engine.lifecycle import fail_node
from openflow.engine.spec import Budget, describe_validation_error
from openflow.engine.state import BudgetSet, Failed, NodeState, RunSnapshot
from openflow.engine.step import Step

#: What the post-run review says when the budget left no room for it.
REVIEW_SKIPPED = "Skipped: the run's budget is spent."


def run_budget(workflow_budget: Budget | None, run_budget: Budget | None) -> Budget | None:
    """The workflow's budget with the run's own over it, field by field; None for no limit."""
    merged = (workflow_budget or Budget()).over(run_budget)
    return None if merged.empty else merged


def spent_tokens(s: RunSnapshot) -> int:
    return s.tokens_in + s.tokens_out


def reached(s: RunSnapshot) -> str | None:
    """Why the run may call no model now (what it spent of what limit), or None."""
    budget = s.budget
    if budget is None:
        return None
    cost = s.cost_usd or 0.0
    if budget.max_cost_usd is not None and cost >= budget.max_cost_usd:
        return (
            f"budget reached: ${cost:.4f} of ${budget.max_cost_usd:.4f} spent; raise it with "
            f"`openflow runs budget {s.run_id} --max-cost USD`"
        )
    tokens = spent_tokens(s)
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return (
            f"budget reached: {tokens:,} of {budget.max_tokens:,} tokens spent; raise it with "
            f"`openflow runs budget {s.run_id} --max-tokens N`"
        )
    return None


def hold(step: Step, seat: Seat) -> bool:
    """Whether the seat's next model call must wait for a larger budget (its node paused)."""
    reason = reached(step.s)
    if reason is None:
        return False
    if not held(step.s.nodes[seat.node_id]):
        fail_node(step, seat.node_id, reason, budget=True)
    return True


def held(ns: NodeState) -> bool:
    """Whether the node waits for a larger budget."""
    return isinstance(ns.phase, Failed) and ns.phase.budget


def raised(s: RunSnapshot, fact: BudgetSet) -> Budget | None:
    """The run's budget with a person's fields over it."""
    given = Budget(max_cost_usd=fact.max_cost_usd, max_tokens=fact.max_tokens)
    return run_budget(s.budget, given)


def check_budget(fact: BudgetSet) -> str | None:
    """Why a budget action cannot apply, or None."""
    if fact.max_cost_usd is None and fact.max_tokens is None:
        return "a budget action needs max_cost_usd or max_tokens"
    try:
        Budget(max_cost_usd=fact.max_cost_usd, max_tokens=fact.max_tokens)
    except ValidationError as exc:
        return describe_validation_error(exc)
    return None


__all__ = [
    "REVIEW_SKIPPED",
    "check_budget",
    "held",
    "hold",
    "raised",
    "reached",
    "run_budget",
    "spent_tokens",
]
