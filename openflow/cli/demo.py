"""`openflow demo`: the bundled example, end to end, on an embedded stack."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from openflow.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BadInput,
    load_valid_workflow,
    new_console,
    run_main,
    until_stopped,
)
from openflow.cli.follow import (
    Follower,
    file_live_source,
)
from openflow.cli.runs import follow_until_stopped
from openflow.cli.stack import LocalStack, local_stack
from openflow.client import (
    Runs,
)
from openflow.engine.spec import Workflow
from openflow.paths import openflow_home
from openflow.settings import SettingsError, load_settings

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
DEMO_EXAMPLE = "release_notes"
DEMO_ENTRYPOINT = (
    "Changes since v1.4: resumable runs after a crash; `openflow runs list` filters by status; "
    "the HTTP API streams token deltas over SSE; fixed a race where two approvals of the same "
    "batch were both applied; dropped Python 3.10 support."
)
PROVIDER_KEYS = (("ANTHROPIC_API_KEY", "anthropic"), ("OPENAI_API_KEY", "openai"))


@dataclass(frozen=True)
class DemoPlan:
    """What the demo runs and with which provider."""

    workflow: Workflow
    provider_id: str
    worker_env: dict[str, str]


def demo_plan(home: Path, examples: Path = EXAMPLES_DIR) -> DemoPlan:
    """The bundled example and a provider: a key's provider when one is set, else scripted."""
    workflow_path = examples / f"{DEMO_EXAMPLE}.workflow.json"
    script_path = examples / f"{DEMO_EXAMPLE}.script.json"
    if not workflow_path.is_file() or not script_path.is_file():
        raise BadInput(
            f"the bundled example is missing from {examples}; run the demo from a source "
            'checkout installed with `pip install -e ".[dev]"`'
        )
    workflow = load_valid_workflow(workflow_path)
    env = dict(os.environ)
    for variable, provider_id in PROVIDER_KEYS:
        if env.get(variable, "").strip():
            return DemoPlan(workflow, provider_id, env)
    try:
        settings = load_settings(home)
    except SettingsError as exc:
        raise BadInput(str(exc)) from None
    profile = settings.profile("scripted")
    if profile is not None and (profile.script is not None or profile.script_path):
        raise BadInput(
            f"the 'scripted' profile in {home / 'settings.json'} has its own script; run the demo "
            "with another home, e.g. `OPENFLOW_HOME=~/.openflow-demo openflow demo`"
        )
    env["OPENFLOW_SCRIPT"] = str(script_path)
    return DemoPlan(workflow, "scripted", env)


def cmd_demo(args: argparse.Namespace) -> int:
    """`openflow demo`: the bundled example, end to end, on an embedded stack."""
    plan = demo_plan(openflow_home())
    stay_up = not args.exit and sys.stdin.isatty()
    return run_main(_demo(local_stack(args, worker_env=plan.worker_env), plan, stay_up))


async def _demo(stack: LocalStack, plan: DemoPlan, stay_up: bool) -> int:
    console = new_console()
    async with stack:
        runs = Runs(stack.client, stack.task_queue)
        run_id = await runs.start(
            plan.workflow, entrypoint=DEMO_ENTRYPOINT, provider_id=plan.provider_id
        )
        console.print(f"Demo: {plan.workflow.name!r} with the {plan.provider_id!r} provider")
        console.print(f"Run id:    {run_id}")
        console.print(f"Web UI:    {stack.run_url(run_id)}", soft_wrap=True)
        console.print(f"Pages:     {stack.api_url}/ui/runs/{run_id}", soft_wrap=True)
        console.print(f"HTTP API:  {stack.api_url}/runs/{run_id}", soft_wrap=True)
        follower = Follower(
            runs,
            run_id,
            console,
            interactive=True,
            auto_approve=True,
            live=file_live_source(stack.home),
            labels={node.id: node.label for node in plan.workflow.nodes},
        )
        outcome = await follow_until_stopped(follower)
        if outcome is None:
            return EXIT_INTERRUPTED
        code = EXIT_OK if outcome.status == "completed" else EXIT_FAILED
        console.print(f"Run {run_id} {outcome.status}.")
        workspace = stack.home / "runs" / run_id
        console.print(f"Run id:    {run_id}")
        console.print(f"Web UI:    {stack.run_url(run_id)}", soft_wrap=True)
        console.print(f"Pages:     {stack.api_url}/ui", soft_wrap=True)
        console.print(f"HTTP API:  {stack.api_url}  (docs at {stack.api_url}/docs)", soft_wrap=True)
        console.print(f"Run files: {workspace}", soft_wrap=True)
        if stay_up:
            console.print("Everything stays up for inspection. Press Ctrl-C to stop.")
            failed = await until_stopped(stack.tasks)
            if failed:
                code = EXIT_FAILED
    return code
