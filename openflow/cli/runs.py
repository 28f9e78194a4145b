"""`openflow run`, `validate` and `openflow runs ...`: start, look at and act on runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from openflow import contracts as c
from openflow.attachments import AttachmentError, Upload, check_count, prepare, read_upload
from openflow.backends import open_backends
from openflow.cli.approvals import approval_action, revoke_action
from openflow.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    MAX_SEQ,
    STOP_TIMEOUT_S,
    BadInput,
    answer_in_time,
    connect_runs,
    load_valid_workflow,
    new_console,
    read_workflow_file,
    run_main,
    until_stopped,
)
from openflow.cli.follow import (
    Follower,
    FollowOutcome,
    answer_hint,
    call_summary,
    describe_pause,
    file_live_source,
    find_pauses,
    usage_text,
)
from openflow.client import RunError, event_json, state_json
from openflow.connect import load_target
from openflow.engine import RunEvent, WorkflowRunState
from openflow.engine.errors import LimitExceeded
from openflow.engine.events import NodeAwaitingInput
from openflow.engine.graph import workflow_problems
from openflow.engine.limits import MAX_ENTRYPOINT_BYTES
from openflow.engine.spec import Budget, Workflow
from openflow.paths import openflow_home
from openflow.schedules import ScheduleInvalid, check_schedule
from openflow.settings import runtime_settings


def cmd_validate(args: argparse.Namespace) -> int:
    """`openflow validate FILE`: 'ok' and 0, or one line per problem and 2."""
    workflow = read_workflow_file(args.file)
    problems = [problem.message for problem in workflow_problems(workflow)]
    try:
        check_schedule(workflow)
    except ScheduleInvalid as exc:
        problems.append(str(exc))
    if not problems:
        print("ok")
        return EXIT_OK
    for problem in problems:
        print(problem)
    return EXIT_BAD_INPUT


async def follow_until_stopped(follower: Follower) -> FollowOutcome | None:
    """Follow a run; None when Ctrl-C or SIGTERM came first."""
    following = asyncio.create_task(follower.run())
    if await until_stopped([following], finished_ok=True):
        return following.result()
    return None


# --- run a workflow file -------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """`openflow run FILE`: start a run and follow it (or print its id with --detach)."""
    workflow = load_valid_workflow(args.file)
    project = None
    if args.project is not None:
        if not args.project.is_dir():
            raise BadInput(f"--project {args.project}: no such folder — give an existing folder")
        project = str(args.project.resolve())
    if args.input_file is not None:
        args.input = read_entrypoint_file(args.input_file)
    args.uploads = read_attachments(args.attach)
    if not args.detach:
        open_backends(openflow_home())  # the live channel: an unusable database stops us here
    return run_main(_start_and_follow(args, workflow, project))


def read_entrypoint_file(path: Path) -> str:
    """`--input-file`: the entrypoint text of a UTF-8 file ('-': standard input), bounded."""
    limit = MAX_ENTRYPOINT_BYTES.value
    where = "standard input" if str(path) == "-" else str(path)
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with path.open("rb") as file:
                data = file.read(limit + 1)
    except FileNotFoundError:
        raise BadInput(f"--input-file {path}: no such file — check the path") from None
    except IsADirectoryError:
        raise BadInput(f"--input-file {path}: is a folder — give a text file") from None
    except OSError as exc:
        raise BadInput(f"--input-file {path}: cannot read it: {exc.strerror}") from None
    if len(data) > limit:
        size = path.stat().st_size if where != "standard input" and path.is_file() else 0
        raise BadInput(
            "--input-file: "
            + MAX_ENTRYPOINT_BYTES.message(
                f"the entrypoint in {where}",
                max(size, limit + 1),
                "shorten it, or put the material in a file the run reads",
                verb="is at least" if size <= limit else "is",
            )
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"--input-file {where}: not UTF-8 text (byte {exc.start}) — save it as UTF-8"
        ) from None


def read_attachments(paths: list[Path]) -> list[Upload]:
    """`--attach`: each file read and checked (size, type, count), or BadInput in one line."""
    try:
        check_count(len(paths))
        uploads = [read_upload(path) for path in paths]
        prepare(uploads)
    except (AttachmentError, LimitExceeded) as exc:
        raise BadInput(str(exc)) from None
    return uploads


async def _start_and_follow(
    args: argparse.Namespace, workflow: Workflow, project: str | None
) -> int:
    runs = await connect_runs()
    run_id = await runs.start(
        workflow,
        entrypoint=args.input,
        run_id=args.run_id,
        project_dir=project,
        attachments=args.uploads,
        allow_concurrent=args.allow_concurrent,
        budget=Budget(max_cost_usd=args.max_cost, max_tokens=args.max_tokens),
    )
    if args.detach:
        print(run_id, flush=True)
        print(f"Web UI: {run_ui_url(run_id)}", file=sys.stderr, flush=True)
        return EXIT_OK
    console = new_console()
    console.print(f"Run id:  {run_id}")
    console.print(f"Web UI:  {run_ui_url(run_id)}", soft_wrap=True)
    interactive = sys.stdin.isatty()
    follower = Follower(
        runs,
        run_id,
        console,
        interactive=interactive,
        live=file_live_source(openflow_home()),
        labels={node.id: node.label for node in workflow.nodes},
    )
    outcome = await follow_until_stopped(follower)
    if outcome is None:
        console.print(
            f"Stopped following; the run goes on. See it with `openflow runs show {run_id}`."
        )
        return EXIT_INTERRUPTED
    return _report_outcome(console, run_id, outcome)


def _report_outcome(console: Console, run_id: str, outcome: FollowOutcome) -> int:
    if outcome.waiting:
        console.print(f"Run {run_id} is paused, waiting for:")
        for pause in outcome.pauses:
            console.print(f"  {describe_pause(pause)}", soft_wrap=True)
            console.print(f"    answer: {answer_hint(run_id, pause)}", soft_wrap=True)
        return EXIT_OK
    console.print(f"Run {run_id} {outcome.status}.")
    return EXIT_OK if outcome.status == "completed" else EXIT_FAILED


def run_ui_url(run_id: str) -> str:
    """The Web UI page of a run: $OPENFLOW_UI_URL, else the embedded server's UI port."""
    base = (runtime_settings(only=("ui_url",)).ui_url or "").rstrip("/")
    target = load_target()
    if not base:
        host, _, port = target.address.rpartition(":")
        ui_port = int(port) + 1000 if port.isdigit() else 8233
        base = f"http://{host or '127.0.0.1'}:{ui_port}"
    return f"{base}/namespaces/{target.namespace}/workflows/{run_id}"


# --- runs ------------------------------------------------------------------------------------


def cmd_runs_list(args: argparse.Namespace) -> int:
    """`openflow runs list`: one run a line, run id first, newest first."""

    async def main() -> int:
        runs = await connect_runs()
        listed = await runs.list(status=args.status, workflow_id=args.workflow)
        costs = await _costs(runs, [run.run_id for run in listed]) if args.cost else {}
        for run in listed:
            awaiting = f"  awaiting {','.join(run.awaiting)}" if run.awaiting else ""
            name = run.workflow_name or run.workflow_id
            cost = f"  {costs.get(run.run_id, '-'):>9}" if args.cost else ""
            print(f"{run.run_id}  {run.status:<9}{cost}  {run.start_time or '-'}  {name}{awaiting}")
        return EXIT_OK

    return run_main(main())


#: How many runs `runs list --cost` asks at once, and how long it waits for each.
COST_QUERIES = 8
COST_QUERY_SECONDS = 5.0


async def _costs(runs: Any, run_ids: list[str]) -> dict[str, str]:
    """`~$0.0123` for each run whose `state` query answers in time (one query per run)."""
    gate = asyncio.Semaphore(COST_QUERIES)

    async def one(run_id: str) -> tuple[str, str]:
        async with gate:
            try:
                state = await asyncio.wait_for(runs.state(run_id), COST_QUERY_SECONDS)
            except (TimeoutError, RPCError, WorkflowQueryFailedError, RunError):
                return run_id, "-"
            return run_id, f"~${state.usage.run.estimated_cost_usd:.4f}"

    return dict(await asyncio.gather(*(one(run_id) for run_id in run_ids)))


def cmd_runs_show(args: argparse.Namespace) -> int:
    """`openflow runs show ID`: the status and what the run waits for; --json: the state."""

    async def main() -> int:
        runs = await connect_runs()
        status = await runs.status(args.run_id)
        state = await answer_in_time(runs.state(args.run_id), args.run_id, runs)
        if status not in ("running", "paused"):
            state = state.model_copy(update={"status": status})
        if args.json:
            print(json.dumps(state_json(state), indent=2, ensure_ascii=False))
            return EXIT_OK
        events = await answer_in_time(runs.events(args.run_id), args.run_id, runs)
        _print_run(args.run_id, state, events)
        return EXIT_OK

    return run_main(main())


def _print_run(run_id: str, state: WorkflowRunState, events: list[RunEvent]) -> None:
    print(f"run       {run_id}")
    print(f"status    {state.status}")
    if state.workflow_id:
        print(f"workflow  {state.workflow_id}")
    if state.last_error:
        print(f"error     {state.last_error}")
    print(f"usage     {usage_text(state.usage.run)}")
    by_node = state.usage.by_node
    statuses = state.status_by_node
    if statuses:
        print("nodes")
        width = max(len(node) for node in statuses)
        for node, status in sorted(statuses.items()):
            spent = f"  {usage_text(by_node[node])}" if node in by_node else ""
            print(f"  {node:<{width}}  {status:<22}{spent}".rstrip())
    opened: dict[str, Any] = {}
    for event in events:
        if isinstance(event, NodeAwaitingInput):
            opened[f"question:{event.node_id}"] = event.context
    pauses = find_pauses(state, opened)
    if pauses:
        print("waiting for")
        for pause in pauses:
            print(f"  {describe_pause(pause)}")
            if pause.kind == "approval" and len(pause.calls) > 1:
                for call in pause.calls:
                    print(f"    call {call.id}: {call_summary(call)}")
            print(f"    answer: {answer_hint(run_id, pause)}")
            if pause.kind == "approval" and len(pause.calls) > 1:
                command = f"openflow runs approve {run_id} {pause.approval_id}"
                print(f"    per call: {command} --deny-call CALL_ID=REASON (see --help)")


def cmd_runs_events(args: argparse.Namespace) -> int:
    """`openflow runs events ID`: the durable events after --after, as lines or --json."""
    if not 0 <= args.after <= MAX_SEQ:
        raise BadInput(f"--after must be a seq number from 0 to {MAX_SEQ}")

    async def main() -> int:
        runs = await connect_runs()
        events = await answer_in_time(runs.events(args.run_id, after=args.after), args.run_id, runs)
        if args.json:
            print(json.dumps([event_json(e) for e in events], indent=2, ensure_ascii=False))
            return EXIT_OK
        for event in events:
            print(event_line(event))
        return EXIT_OK

    return run_main(main())


def event_line(event: RunEvent, width: int = 80) -> str:
    """`  12  NodeStarted  node_id=plan model_attempt=0`: one event on one line."""
    data = event_json(event)
    fields = []
    for key, value in data.items():
        if key in ("seq", "type", "at_ms"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(text.split())
        if len(text) > width:
            text = text[: width - 1] + "…"
        fields.append(f"{key}={text}")
    return f"{event.seq:>5}  {event.type}  {' '.join(fields)}".rstrip()


def cmd_runs_input(args: argparse.Namespace) -> int:
    """`openflow runs input ID NODE TEXT`: answer a node waiting for input."""
    action = c.Action(kind="input", node_id=args.node_id, text=args.text)
    uploads = read_attachments(args.attach)
    return _act(args.run_id, action, f"answered {args.node_id!r}", uploads)


def cmd_runs_decide(args: argparse.Namespace) -> int:
    """`openflow runs approve|deny ID APPROVAL [--reason] [--call ...]`: decide a tool batch."""
    action = approval_action(args)
    if action.decisions:
        allowed = sum(1 for d in action.decisions if d.allow)
        rest = "approved" if action.allow else "denied"
        done = f"decided {args.approval_id!r}: {allowed} approved, "
        done += f"{len(action.decisions) - allowed} denied by call, any other call {rest}"
    else:
        done = f"{'approved' if args.allow else 'denied'} {args.approval_id!r}"
    return _act(args.run_id, action, done)


def cmd_runs_revoke(args: argparse.Namespace) -> int:
    """`openflow runs revoke ID TOOL[:PATH_PREFIX]`: take a remembered approval back."""
    action = revoke_action(args)
    return _act(args.run_id, action, f"revoked {args.grant!r}")


def cmd_runs_retry(args: argparse.Namespace) -> int:
    """`openflow runs retry ID NODE [--message]`: retry a failed or interrupted node."""
    action = c.Action(kind="retry", node_id=args.node_id, message=args.message)
    return _act(args.run_id, action, f"retrying {args.node_id!r}")


def cmd_runs_budget(args: argparse.Namespace) -> int:
    """`openflow runs budget ID --max-cost USD [--max-tokens N]`: set the run's budget."""
    if args.max_cost is None and args.max_tokens is None:
        raise BadInput("give --max-cost USD, --max-tokens N or both")
    action = c.Action(kind="budget", max_cost_usd=args.max_cost, max_tokens=args.max_tokens)
    parts = [f"${args.max_cost:.4f}"] if args.max_cost is not None else []
    if args.max_tokens is not None:
        parts.append(f"{args.max_tokens:,} tokens")
    return _act(args.run_id, action, f"budget set to {' and '.join(parts)}")


def cmd_runs_message(args: argparse.Namespace) -> int:
    """`openflow runs message ID NODE TEXT`: a message a live node sees on its next turn."""
    action = c.Action(kind="message", node_id=args.node_id, text=args.text)
    uploads = read_attachments(args.attach)
    return _act(args.run_id, action, f"sent to {args.node_id!r}", uploads)


def _act(run_id: str, action: c.Action, done: str, uploads: list[Upload] | None = None) -> int:
    async def main() -> int:
        runs = await connect_runs()
        result = await runs.act(run_id, action, uploads or ())
        status = result.get("status")
        print(f"{done}; run {run_id} is {status}" if status else done)
        return EXIT_OK

    return run_main(main())


def cmd_runs_stop(args: argparse.Namespace) -> int:
    """`openflow runs stop ID`: stop a run and wait until it has stopped."""

    async def main() -> int:
        runs = await connect_runs()
        await runs.stop(args.run_id)
        handle = runs.client.get_workflow_handle(args.run_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_TIMEOUT_S
        while loop.time() < deadline:
            if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
                print(
                    f"stopped {args.run_id}; continue it with `openflow runs resume {args.run_id}`"
                )
                return EXIT_OK
            await asyncio.sleep(0.1)
        print(f"stop requested; run {args.run_id} is still winding down")
        return EXIT_OK

    return run_main(main())


def cmd_runs_resume(args: argparse.Namespace) -> int:
    """`openflow runs resume ID [--message NODE TEXT]`: a new execution from the checkpoint."""
    node_id, text = args.continuation if args.continuation else (None, None)

    async def main() -> int:
        runs = await connect_runs()
        await runs.resume(args.run_id, node_id, text)
        print(f"resumed {args.run_id}" + (f" with a message to {node_id!r}" if node_id else ""))
        return EXIT_OK

    return run_main(main())


def cmd_runs_interrupt(args: argparse.Namespace) -> int:
    """`openflow runs interrupt ID NODE`: cancel a running node's work; retry it later."""
    action = c.Action(kind="interrupt", node_id=args.node_id)
    hint = f"interrupted {args.node_id!r} (retry it with `openflow runs retry {args.run_id} "
    return _act(args.run_id, action, hint + f"{args.node_id} --message TEXT`)")


def cmd_runs_revert(args: argparse.Namespace) -> int:
    """`openflow runs revert ID BATCH_ID`: restore the files an edit batch changed."""

    async def main() -> int:
        runs = await connect_runs()
        paths = await runs.revert(args.run_id, args.batch_id)
        print(f"reverted edit batch {args.batch_id!r}: restored {', '.join(paths) or 'no files'}")
        return EXIT_OK

    return run_main(main())
