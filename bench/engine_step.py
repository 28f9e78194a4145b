"""CPU per reducer step of the pure engine, early and late in a long conversation.

One node runs `--turns` tool turns (a bash call, then its result) on the engine alone, with the
shell's bookkeeping played as a worker plays it: a model turn writes its reply to the transcript
(`persisted_len`, `in_transcript`), a batch's results sit in the run store under its key. Every
`advance` is timed (process CPU) and filed under the node's transcript length before the step;
the figures are the median step around `--short` and `--long` items.

    python -m bench.engine_step [--turns 260] [--short 50] [--long 500] [--rounds 5]
    python -m bench.engine_step --before /tmp/old-checkout   # the same, old code side by side
    python -m bench.engine_step --dag [--runs 200] [--before /tmp/old-checkout]

`--before` runs this script again with `PYTHONPATH` pointing at another checkout (an older
commit, say), its rounds alternating with this checkout's, and prints both.

`--dag` measures instead the CPU the engine spends on a whole run of `bench.scale.dag()` (a
root, two parallel children, the post-run review; each one turn that submits, as the
throughput batch of `bench.scale` runs it): the run's start, for each model call the pure
work the shell does before it sends one (the header by reference, its header set's digest,
the input's recipe, the eager reads), each reply's step and the dump of what travels (the
intents' deltas and recipes). The figure is the median of `--runs` runs' CPU, in µs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from openflow.engine import advance as engine
from openflow.engine.advance import eager_tools
from openflow.engine.headers import by_reference, expected_parts, header_set, part_digest
from openflow.engine.policy import HARNESS_SUBMIT
from openflow.engine.recipes import input_recipe
from openflow.engine.request import ModelReply, RawToolCall, UsageReport
from openflow.engine.spec import Workflow
from openflow.engine.state import (
    CallModel,
    Fact,
    HandoffStored,
    ModelReplied,
    Plan,
    RunSnapshot,
    RunTools,
    SleepUntil,
    StoredItemRef,
    TimerFired,
    ToolResultSummary,
    ToolsFinished,
    WriteHandoff,
)

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 10  # steps on each side of a target length
OUTPUT = "x" * 400  # a tool result's preview


def one_node() -> Workflow:
    return Workflow.model_validate(
        {
            "id": "bench",
            "name": "bench",
            "nodes": [
                {
                    "id": "work",
                    "label": "Work",
                    "kind": "agent",
                    "position": {"x": 0, "y": 0},
                    "agent": {
                        "system_prompt": "bench",
                        "task_prompt": "bench",
                        "model": "bench-model",
                        "output_schema": {
                            "type": "object",
                            "properties": {"summary": {"type": "string"}},
                        },
                        "handoff": {"format": "json"},
                        "tools": {"approvalMode": "yolo"},
                    },
                }
            ],
            "edges": [],
        }
    )


def _call(name: str, args: dict[str, Any], call_id: str) -> RawToolCall:
    return RawToolCall(id=call_id, name=name, arguments=args, arguments_raw=json.dumps(args))


def _delta_len(intent: CallModel) -> int:
    return sum(i.count if isinstance(i, StoredItemRef) else 1 for i in intent.delta.items)


def _reply(intent: CallModel, turn: int, turns: int) -> ModelReplied:
    if turn < turns:
        calls = (_call("bash", {"command": f"make test-{turn}"}, f"call-{turn}"),)
        text = f"Running the tests, round {turn}."
    else:
        calls = (_call(HARNESS_SUBMIT, {"output": {"summary": "done"}}, f"call-{turn}"),)
        text = ""
    reply = ModelReply(wire="scripted", model="bench-model", text=text, tool_calls=calls)
    persisted = intent.delta.base_len + _delta_len(intent)
    return ModelReplied(
        call_id=intent.call_id,
        node_id=intent.node_id,
        reply=reply,
        persisted_len=persisted,
        in_transcript=True,
    )


def _results(batch: RunTools) -> ToolsFinished:
    results = tuple(
        ToolResultSummary(tool_call_id=c.id, tool_name=c.name, content=OUTPUT) for c in batch.calls
    )
    return ToolsFinished(batch_id=batch.batch_id, results=results, store_key=batch.batch_id)


def one_run(turns: int) -> list[tuple[int, int]]:
    """(transcript length before the step, CPU ns of `advance`) for every step of one run."""
    wf = one_node()
    now = 0
    plan: Plan = engine.start(wf, "bench-run", now, entrypoint_text="go", tool_names=("bash",))
    pending = list(plan.intents)
    turn = 0
    samples: list[tuple[int, int]] = []
    while pending and not plan.done:
        intent = pending.pop(0)
        fact: Fact
        if isinstance(intent, CallModel):
            turn += 1
            fact = _reply(intent, turn, turns)
        elif isinstance(intent, RunTools):
            fact = _results(intent)
        elif isinstance(intent, WriteHandoff):
            fact = HandoffStored(node_id=intent.node_id, manifest={"format": intent.format})
        elif isinstance(intent, SleepUntil):
            now = max(now, intent.wake_at_ms)
            fact = TimerFired(node_id=intent.node_id)
        else:
            continue
        length = len(plan.snapshot.nodes["work"].conversation.transcript)
        now += 1
        began = time.process_time_ns()
        plan = engine.advance(plan.snapshot, [fact], now)
        samples.append((length, time.process_time_ns() - began))
        pending.extend(plan.intents)
    if plan.snapshot.nodes["work"].phase.kind != "done":
        raise SystemExit(f"the bench run did not complete: {plan.snapshot.nodes['work'].phase}")
    return samples


#: The tools a prepared run of the scale DAG offers (as `prepare_run` lists them).
DAG_TOOLS = (
    "apply_patch", "ast_edit", "ast_grep", "bash", "edit", "find", "ls",
    "openflow_update_todo_list", "read", "search", "write",
)  # fmt: skip


def _submit(intent: CallModel, output: dict[str, Any]) -> ModelReplied:
    """The reply of a scripted echo turn: one call that submits `output`, in the transcript."""
    node = intent.node_id
    call = _call(HARNESS_SUBMIT, {"output": output, "assistant_message": ""}, f"call-{node}-1-1")
    reply = ModelReply(
        wire="scripted",
        model="bench-model",
        tool_calls=(call,),
        usage=UsageReport(prompt_tokens=100, completion_tokens=10, cost_usd=0.0),
    )
    return ModelReplied(
        call_id=intent.call_id,
        node_id=node,
        reply=reply,
        persisted_len=intent.delta.base_len + _delta_len(intent),
        in_transcript=True,
        ms=0,
        # A node's turn stores the handoff of what it submits (the review has none).
        handoff_stored=intent.purpose == "node",
    )


def _shell_call(intent: CallModel, snapshot: RunSnapshot, parts: frozenset[str]) -> None:
    """The engine's part of what the shell does before it sends a model call
    (`workflows.calls.model_turn`): the header by reference, its set's digest, the input's
    recipe, the eager reads; then the dump of the call's delta and recipe (the activity's
    input)."""
    header = intent.request.model_copy(update={"turn_index": 0})
    slim, refs = by_reference(header, parts)
    recipe = None
    if refs is not None and part_digest(header_set(slim, refs)) in parts:
        _, recipe = input_recipe(snapshot, slim.input, parts)
    eager_tools(snapshot, intent.node_id, intent.request.tool_names)
    intent.delta.model_dump(mode="json")
    if recipe is not None:
        recipe.model_dump(mode="json")


def dag_run(wf: Workflow, parts: frozenset[str] | None) -> tuple[int, frozenset[str]]:
    """(CPU ns, the header parts its start foretold) of one run of the scale DAG on the engine
    alone; `parts` from an earlier run of the same workflow (a worker keeps them), or None."""
    began = time.process_time_ns()
    now = 1_000
    plan = engine.start(
        wf,
        "bench-run",
        now,
        entrypoint_text="bench",
        execution_dir="/tmp/bench/runs/bench-run/workspace",
        tool_names=DAG_TOOLS,
    )
    if parts is None:
        paused = time.process_time_ns()
        parts = frozenset(expected_parts(plan.snapshot))  # once a workflow on a worker
        began += time.process_time_ns() - paused
    pending = [i for i in plan.intents if isinstance(i, CallModel)]
    while pending:
        # The children's turns run in parallel: each reply is a step of its own.
        replies: list[ModelReplied] = []
        for intent in pending:
            _shell_call(intent, plan.snapshot, parts)
            # The reply comes from the activity's result (the shell's work, not timed).
            paused = time.process_time_ns()
            output = {"suggestions": []} if intent.purpose == "review" else {"summary": "bench"}
            replies.append(_submit(intent, output))
            began += time.process_time_ns() - paused
        pending = []
        for fact in replies:
            now += 5
            plan = engine.advance(plan.snapshot, [fact], now, each=True)
            pending += [i for i in plan.intents if isinstance(i, CallModel)]
    elapsed = time.process_time_ns() - began
    if not plan.done or plan.status != "completed":
        raise SystemExit(f"the bench run did not complete: {plan.status}")
    return elapsed, parts


def measure_dag(runs: int, rounds: int) -> dict[str, float]:
    from bench.scale import dag

    wf = dag()  # one workflow for every run, as a worker shares it by digest
    _, parts = dag_run(wf, None)
    for _ in range(20):  # warm up imports and caches
        dag_run(wf, parts)
    medians = []
    for _ in range(rounds):
        medians.append(statistics.median(dag_run(wf, parts)[0] for _ in range(runs)) / 1000)
    return {"run": min(medians)}


def around(samples: list[tuple[int, int]], length: int) -> list[int]:
    """The CPU ns of the `WINDOW` steps each side of the first at `length` items or more."""
    at = next((i for i, (n, _) in enumerate(samples) if n >= length), None)
    if at is None:
        raise SystemExit(f"no step reached {length} items: raise --turns")
    return [ns for _, ns in samples[max(0, at - WINDOW) : at + WINDOW]]


def measure(turns: int, short: int, long: int, rounds: int) -> dict[str, float]:
    one_run(min(turns, 40))  # warm up imports and caches
    shorts: list[float] = []
    longs: list[float] = []
    for _ in range(rounds):
        samples = one_run(turns)
        shorts.append(statistics.median(around(samples, short)) / 1000)
        longs.append(statistics.median(around(samples, long)) / 1000)
    return {"short": min(shorts), "long": min(longs)}


def _measure_in(checkout: Path, args: argparse.Namespace) -> dict[str, float]:
    """One round of this script's figures with `checkout`'s engine, in a process of its own."""
    forwarded = ["--turns", str(args.turns), "--short", str(args.short)]
    forwarded += ["--long", str(args.long), "--rounds", "1", "--json"]
    if args.dag:
        forwarded += ["--dag", "--runs", str(args.runs)]
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *forwarded],
        env={**os.environ, "PYTHONPATH": str(checkout)},
        cwd=checkout,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=260, help="tool turns in the run")
    parser.add_argument("--short", type=int, default=50, help="transcript items, early")
    parser.add_argument("--long", type=int, default=500, help="transcript items, late")
    parser.add_argument("--rounds", type=int, default=5, help="runs; the best median is kept")
    parser.add_argument("--before", help="another checkout to measure the same way")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    parser.add_argument("--dag", action="store_true", help="CPU per run of the scale DAG")
    parser.add_argument("--runs", type=int, default=200, help="--dag: runs a round")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.rounds < 1 or args.runs < 1 or not 0 < args.short < args.long:
        parser.error("--turns, --runs and --rounds must be positive and 0 < --short < --long")
    keys = ("run",) if args.dag else ("short", "long")
    if args.json or not args.before:
        if args.dag:
            mine = measure_dag(args.runs, args.rounds)
        else:
            mine = measure(args.turns, args.short, args.long, args.rounds)
        if args.json:
            print(json.dumps(mine))
            return 0
        rows = [("this checkout", mine)]
    else:
        before = Path(args.before).resolve()
        if not (before / "openflow" / "engine").is_dir():
            parser.error(f"--before {before}: no openflow/engine there")
        # Rounds alternate between the two checkouts, so a busy machine slows both alike.
        sides = {f"before ({before})": before, "this checkout": ROOT}
        seen: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, checkout in sides.items():
                seen[name].append(_measure_in(checkout, args))
        rows = [(name, {k: min(r[k] for r in runs) for k in keys}) for name, runs in seen.items()]
    if args.dag:
        print(f"CPU of the engine per run of the scale DAG (µs, the best of {args.rounds} rounds'")
        print(f"medians of {args.runs} runs):")
        for name, row in rows:
            print(f"{name:<40} {row['run']:>12.0f}")
        return 0
    print(f"CPU per engine step (µs, the best of {args.rounds} rounds' medians):")
    print(f"{'':<40} {args.short:>6} items {args.long:>6} items   long/short")
    for name, row in rows:
        ratio = row["long"] / row["short"]
        print(f"{name:<40} {row['short']:>12.0f} {row['long']:>12.0f}   {ratio:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
