"""The `openflow` argument parser and the checks every command's arguments pass first."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from openflow.cli.common import DEFAULT_API_HOST, DEFAULT_API_PORT, EXIT_BAD_INPUT, BadInput
from openflow.cli.demo import cmd_demo
from openflow.cli.runs import (
    cmd_run,
    cmd_runs_budget,
    cmd_runs_decide,
    cmd_runs_events,
    cmd_runs_input,
    cmd_runs_interrupt,
    cmd_runs_list,
    cmd_runs_message,
    cmd_runs_resume,
    cmd_runs_retry,
    cmd_runs_revert,
    cmd_runs_revoke,
    cmd_runs_show,
    cmd_runs_stop,
    cmd_validate,
)
from openflow.cli.schedules import add_schedules_command
from openflow.cli.stack import cmd_api, cmd_dev, cmd_server, cmd_worker
from openflow.cli.workflows import add_workflows_command
from openflow.client import (
    RunError,
    check_run_id,
)
from openflow.engine.errors import LimitExceeded
from openflow.engine.limits import check_entrypoint, check_message
from openflow.engine.spec import MAX_BUDGET_TOKENS, MAX_BUDGET_USD
from openflow.server import (
    DEFAULT_ADDRESS,
)
from openflow.settings import SettingsError, runtime_settings


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand; each sets `handler` to its cmd_ function."""
    parser = _Parser(prog="openflow", description="Run OpenFlow agent workflows on Temporal.")
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", parser_class=_Parser
    )
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="run the bundled example on an embedded server, worker and API",
        description="Start an embedded Temporal server, a worker and the HTTP API, run the "
        "bundled example workflow and keep everything up until Ctrl-C.",
    )
    demo.add_argument(
        "--exit",
        action="store_true",
        help="stop everything once the run ends; exit 0 if it completed",
    )
    _add_stack_options(demo)
    demo.set_defaults(handler=cmd_demo)

    dev = commands.add_parser(
        "dev",
        help="embedded server + worker + API until Ctrl-C",
        description="Start an embedded Temporal server, a worker and the HTTP API until Ctrl-C.",
    )
    _add_stack_options(dev)
    dev.set_defaults(handler=cmd_dev)

    server = commands.add_parser(
        "server",
        help="the embedded Temporal server, in the foreground",
        description="Run the embedded Temporal dev server on $OPENFLOW_TEMPORAL_ADDRESS "
        f"(default {DEFAULT_ADDRESS}), its database in $OPENFLOW_HOME, until Ctrl-C.",
    )
    server.add_argument(
        "--ui-port", type=int, metavar="N", help="Web UI port (default: the gRPC port + 1000)"
    )
    server.set_defaults(handler=cmd_server)

    worker = commands.add_parser(
        "worker",
        help="a worker for $OPENFLOW_TASK_QUEUE, until Ctrl-C",
        description="Run a worker that executes runs from $OPENFLOW_TASK_QUEUE on "
        "$OPENFLOW_TEMPORAL_ADDRESS until Ctrl-C.",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve Prometheus metrics at http://0.0.0.0:N/metrics",
    )
    for flag, variable, what in (
        ("--model-pool", "OPENFLOW_MODEL_POOL", "model calls in flight at once (default 500)"),
        ("--tool-pool", "OPENFLOW_TOOL_POOL", "tool batches running at once (default 16)"),
        (
            "--workflow-cache",
            "OPENFLOW_WORKFLOW_CACHE",
            "runs kept in memory between steps (default 5000)",
        ),
    ):
        worker.add_argument(flag, metavar="N", help=f"{what}; also ${variable}")
    worker.add_argument(
        "--sticky-timeout",
        metavar="SECONDS",
        help="how long a run's next step waits for this worker before another may take it "
        "(default 3); also $OPENFLOW_STICKY_TIMEOUT",
    )
    worker.add_argument(
        "--workflow-pollers",
        metavar="N",
        help="workflow-task polls kept open, a fifth of them for runs new to this worker "
        "(default 5); also $OPENFLOW_WORKFLOW_POLLERS",
    )
    worker.set_defaults(handler=cmd_worker)

    api = commands.add_parser(
        "api", help="the HTTP API", description="Serve the HTTP API (OpenAPI at /docs)."
    )
    api.add_argument("--host", default=DEFAULT_API_HOST, help=f"default {DEFAULT_API_HOST}")
    api.add_argument(
        "--port", type=int, default=DEFAULT_API_PORT, help=f"default {DEFAULT_API_PORT}"
    )
    api.set_defaults(handler=cmd_api)

    validate = commands.add_parser(
        "validate",
        help="check a workflow file",
        description="Check a workflow file: print 'ok', or each problem on its own line.",
    )
    validate.add_argument("file", metavar="FILE", type=Path, help="the .workflow.json file")
    validate.set_defaults(handler=cmd_validate)

    run = commands.add_parser(
        "run",
        help="start a run of a workflow file and follow it",
        description="Start a run and follow it: live progress, and prompts for input and "
        "approvals. Without a terminal it follows until the run ends or waits for a person, "
        "then prints how to answer and exits 0 with the run paused.",
    )
    run.add_argument("file", metavar="FILE", type=Path, help="the .workflow.json file")
    entry = run.add_mutually_exclusive_group()
    entry.add_argument("--input", default="", metavar="TEXT", help="the entrypoint text")
    entry.add_argument(
        "--input-file",
        type=Path,
        metavar="FILE",
        help="read the entrypoint text from FILE ('-' for standard input)",
    )
    run.add_argument("--run-id", metavar="ID", help="the run id (default run-<uuid>)")
    run.add_argument("--project", type=Path, metavar="DIR", help="the folder tools work in")
    run.add_argument("--detach", action="store_true", help="print the run id once started and exit")
    run.add_argument(
        "--attach",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a file the root nodes get with the entrypoint: an image, a PDF or a text file "
        "(repeatable)",
    )
    run.add_argument(
        "--allow-concurrent",
        action="store_true",
        help="start even while another run is changing the --project folder",
    )
    _add_budget_options(run, "(over the workflow's settings.budget)")
    run.set_defaults(handler=cmd_run)

    runs = commands.add_parser(
        "runs", help="look at and act on runs", description="Look at and act on runs."
    )
    actions = runs.add_subparsers(
        title="actions", dest="action", metavar="ACTION", parser_class=_Parser
    )
    actions.required = True
    _add_runs_actions(actions)
    add_workflows_command(commands)
    add_schedules_command(commands)
    return parser


def _add_stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ui-port", type=int, metavar="N", help="Web UI port (default: the gRPC port + 1000)"
    )
    parser.add_argument("--api-host", default=DEFAULT_API_HOST, metavar="HOST")
    parser.add_argument(
        "--api-port",
        type=int,
        metavar="N",
        help=f"HTTP API port (default {DEFAULT_API_PORT}, or a free one when that is taken)",
    )


def _usd(text: str) -> float:
    """A `--max-cost` value: a positive number of US dollars."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of US dollars") from None
    if not 0 < value <= MAX_BUDGET_USD:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a budget: give a positive number of US dollars, at most "
            f"{MAX_BUDGET_USD:,.0f}"
        )
    return value


def _tokens(text: str) -> int:
    """A `--max-tokens` value: a positive whole number."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if not 0 < value <= MAX_BUDGET_TOKENS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a budget: give a positive whole number of tokens"
        )
    return value


def _add_budget_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--max-cost",
        type=_usd,
        metavar="USD",
        help=f"the estimated cost the run may spend on model calls {what}",
    )
    parser.add_argument(
        "--max-tokens",
        type=_tokens,
        metavar="N",
        help=f"the input plus output tokens the run may spend {what}",
    )


def _add_runs_actions(actions: Any) -> None:
    listing = actions.add_parser("list", help="one run a line, run id first, newest first")
    listing.add_argument(
        "--status", choices=["running", "paused", "stopped", "completed", "failed"]
    )
    listing.add_argument("--workflow", metavar="WORKFLOW_ID", help="only runs of this workflow")
    listing.add_argument(
        "--cost",
        action="store_true",
        help="add each run's estimated cost so far (one state query per run)",
    )
    listing.set_defaults(handler=cmd_runs_list)

    show = actions.add_parser("show", help="a run's status, nodes and pauses")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the run state as JSON")
    show.set_defaults(handler=cmd_runs_show)

    events = actions.add_parser("events", help="a run's durable events")
    events.add_argument("run_id", metavar="ID")
    events.add_argument("--after", type=int, default=0, metavar="N", help="only events after seq N")
    events.add_argument("--json", action="store_true", help="print the events as a JSON list")
    events.set_defaults(handler=cmd_runs_events)

    give = actions.add_parser("input", help="answer a node waiting for input")
    give.add_argument("run_id", metavar="ID")
    give.add_argument("node_id", metavar="NODE")
    give.add_argument("text", metavar="TEXT")
    give.add_argument(
        "--attach",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a file to give with the answer: an image, a PDF or a text file (repeatable)",
    )
    give.set_defaults(handler=cmd_runs_input)

    for name, allow in (("approve", True), ("deny", False)):
        decide = actions.add_parser(
            name,
            help=f"{name} a pending tool batch, or some of its calls",
            description=f"{name.capitalize()} every call of a pending tool batch, or decide "
            "its calls one by one: the calls no option names are "
            + (
                "approved (denied when --call is given)."
                if allow
                else "denied, with --reason as the model sees it."
            ),
        )
        decide.add_argument("run_id", metavar="ID")
        decide.add_argument("approval_id", metavar="APPROVAL")
        decide.add_argument("--reason", metavar="TEXT", help="why denied calls are denied")
        _add_call_options(decide)
        decide.set_defaults(handler=cmd_runs_decide, allow=allow)

    revoke = actions.add_parser(
        "revoke",
        help="take back a remembered approval (--remember): matching calls ask again",
    )
    revoke.add_argument("run_id", metavar="ID")
    revoke.add_argument("grant", metavar="TOOL[:PATH_PREFIX]")
    revoke.add_argument("--by", metavar="NAME", help="who revoked it")
    revoke.set_defaults(handler=cmd_runs_revoke)

    retry = actions.add_parser("retry", help="retry a failed or interrupted node")
    retry.add_argument("run_id", metavar="ID")
    retry.add_argument("node_id", metavar="NODE")
    retry.add_argument("--message", metavar="TEXT", help="a note the node sees on its retry")
    retry.set_defaults(handler=cmd_runs_retry)

    budget = actions.add_parser(
        "budget",
        help="set a run's budget; the nodes it paused go on",
        description="Set the run's budget (the option not given stays as it was). The nodes "
        "the budget paused go on at once when the run is under it again.",
    )
    budget.add_argument("run_id", metavar="ID")
    _add_budget_options(budget, "from now on")
    budget.set_defaults(handler=cmd_runs_budget)

    message = actions.add_parser("message", help="send a message to a live node")
    message.add_argument("run_id", metavar="ID")
    message.add_argument("node_id", metavar="NODE")
    message.add_argument("text", metavar="TEXT")
    message.add_argument(
        "--attach",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a file to give with the message: an image, a PDF or a text file (repeatable)",
    )
    message.set_defaults(handler=cmd_runs_message)

    stop = actions.add_parser("stop", help="stop a run (it can be resumed)")
    stop.add_argument("run_id", metavar="ID")
    stop.set_defaults(handler=cmd_runs_stop)

    resume = actions.add_parser("resume", help="continue a stopped, paused or failed run")
    resume.add_argument("run_id", metavar="ID")
    resume.add_argument(
        "--message",
        dest="continuation",
        nargs=2,
        metavar=("NODE", "TEXT"),
        help="the node's next user turn when the run resumes (its answer or retry message)",
    )
    resume.set_defaults(handler=cmd_runs_resume)

    interrupt = actions.add_parser(
        "interrupt", help="interrupt one running node (retry it later, with a message)"
    )
    interrupt.add_argument("run_id", metavar="ID")
    interrupt.add_argument("node_id", metavar="NODE")
    interrupt.set_defaults(handler=cmd_runs_interrupt)

    revert = actions.add_parser(
        "revert", help="restore the files an edit batch changed (see the state's editBatches)"
    )
    revert.add_argument("run_id", metavar="ID")
    revert.add_argument("batch_id", metavar="BATCH_ID")
    revert.set_defaults(handler=cmd_runs_revert)


def _add_call_options(decide: argparse.ArgumentParser) -> None:
    """The per-call options of `runs approve` and `runs deny` (see `cli.approvals`)."""
    decide.add_argument(
        "--call",
        action="append",
        default=[],
        metavar="CALL_ID",
        help="approve this call (repeatable); with approve, the calls not given are denied",
    )
    decide.add_argument(
        "--deny-call",
        action="append",
        default=[],
        metavar="CALL_ID[=REASON]",
        help="deny this call, with its own reason after '=' (repeatable)",
    )
    decide.add_argument(
        "--edit",
        nargs=2,
        action="append",
        default=[],
        metavar=("CALL_ID", "JSON"),
        help="approve this call with these arguments instead (a JSON object; repeatable)",
    )
    decide.add_argument(
        "--remember",
        metavar="TOOL[:PATH_PREFIX]",
        help="approve later calls of TOOL (under PATH_PREFIX) for the rest of the run",
    )
    decide.add_argument("--by", metavar="NAME", help="who decides, as events and the trace show")


def check_environment() -> None:
    """Every OPENFLOW_* variable, checked before any command uses one."""
    try:
        runtime_settings()
    except SettingsError as exc:
        raise BadInput(str(exc)) from None


#: Arguments that name something that exists (a run, a node, an approval), by their metavar.
_ID_ARGUMENTS = (
    ("run_id", "ID"),
    ("node_id", "NODE"),
    ("approval_id", "APPROVAL"),
    ("batch_id", "BATCH_ID"),
    ("workflow", "--workflow"),
)
_TEXT_ARGUMENTS = (("text", "TEXT"), ("message", "--message"), ("reason", "--reason"))
MAX_ID_CHARS = 1000


def check_arguments(args: argparse.Namespace) -> None:
    """The arguments every command shares, checked before the command connects anywhere."""
    if args.handler is cmd_run:
        if args.run_id is not None:
            if not args.run_id.strip():
                raise BadInput("--run-id is empty; give an id or leave the option out")
            try:
                check_run_id(args.run_id)
            except RunError as exc:
                raise BadInput(f"--run-id: {exc}") from None
        check_limit(check_entrypoint, args.input, "--input")
        return
    for name, metavar in _ID_ARGUMENTS:
        value = getattr(args, name, None)
        if value is None:
            continue
        if not value.strip():
            raise BadInput(f"{metavar} is empty; give one (see `openflow runs show ID`)")
        if len(value) > MAX_ID_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise BadInput(
                f"{metavar} is not an id: give at most {MAX_ID_CHARS} printable characters"
            )
    continuation = getattr(args, "continuation", None)
    if continuation is not None:
        node_id, text = continuation
        if not node_id.strip() or not text.strip():
            raise BadInput("--message takes a node id and a text, neither empty")
        check_limit(lambda text: check_message(text, "the text"), text, "--message")
    for name, where in _TEXT_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            check_limit(lambda text: check_message(text, "the text"), value, where)


def check_limit(check: Callable[[str], None], value: str, where: str) -> None:
    """Run a limit check on an argument; BadInput names the argument and the limit."""
    try:
        check(value)
    except LimitExceeded as exc:
        raise BadInput(f"{where}: {exc}") from None
