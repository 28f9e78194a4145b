"""Confines tool processes (`bash`, `ast-grep`) with bubblewrap where the system has it.

A confined process sees the whole file system read-only, except:

* the execution folder, writable, at its own path;
* `/tmp`, writable: the run's own `tmp/` folder (kept across the run's commands), or a private
  in-memory one when the run has no local folder;
* `$OPENFLOW_HOME` (settings.json, every run's files) and the credential paths of
  `OPENFLOW_TOOL_SANDBOX_HIDE`, which are replaced by empty read-only folders (or an empty file);
* `/dev`, a minimal one (null, zero, random, tty, shm: no disks).

It has a PID namespace of its own (it sees only its own processes, and they all end when the
command does), and with `OPENFLOW_TOOL_NETWORK=off` a network namespace of its own (only a
loopback). It runs as the worker's user, without the capabilities that read other processes'
memory (see `process.py`).

`OPENFLOW_TOOL_SANDBOX` chooses: `auto` (confine when bubblewrap works, else run unconfined and
say so once at worker start), `required` (refuse to start a tool process without it), `off`.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from openflow.activities.tools.base import PermissionDenied, ToolContext
from openflow.paths import openflow_home
from openflow.settings import RuntimeSettings

logger = logging.getLogger(__name__)

#: Credential paths of the worker's user hidden by default (relative to its home folder).
DEFAULT_HIDDEN = (
    ".aws",
    ".azure",
    ".config/gcloud",
    ".docker",
    ".git-credentials",
    ".gnupg",
    ".kube",
    ".netrc",
    ".ssh",
)
_PROBE_TIMEOUT_S = 10


@dataclass(frozen=True)
class Policy:
    """What the operator asked for, from the `OPENFLOW_TOOL_*` settings."""

    mode: str
    network: bool
    hidden: tuple[Path, ...]


@dataclass(frozen=True)
class Jail:
    """How one tool process is confined: the argv prefix and the environment it adds."""

    prefix: tuple[str, ...]
    env: dict[str, str]

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        """`argv` run inside the jail, starting in `cwd`."""
        return [*self.prefix, "--chdir", os.fspath(cwd), "--", *argv]


def policy() -> Policy:
    """The confinement settings of this process (read each time: cheap, and tests change them)."""
    try:
        settings = RuntimeSettings()
    except ValidationError as exc:
        names = ", ".join(str(e["loc"][0]).upper() for e in exc.errors())
        raise PermissionDenied(
            f"tool processes are not started: OPENFLOW_{names} is invalid — use "
            "OPENFLOW_TOOL_SANDBOX=auto|required|off and OPENFLOW_TOOL_NETWORK=on|off"
        ) from None
    if settings.tool_sandbox_hide is None:
        user_home = Path(os.path.expanduser("~"))
        hidden = tuple(user_home / rel for rel in DEFAULT_HIDDEN)
    else:
        hidden = tuple(Path(p) for p in settings.tool_sandbox_hide.split(os.pathsep) if p)
    return Policy(mode=settings.tool_sandbox, network=settings.tool_network == "on", hidden=hidden)


def bwrap_binary() -> str | None:
    """Path of the bubblewrap executable, if installed."""
    return shutil.which("bwrap")


def unavailable(network: bool) -> str | None:
    """Why bubblewrap cannot confine a process here, or None when it can."""
    binary = bwrap_binary()
    if binary is None:
        return "bubblewrap (bwrap) is not installed"
    return _probe(binary, network)


@functools.cache
def _probe(binary: str, network: bool) -> str | None:
    """Start one confined `/bin/true` (once per binary and network setting)."""
    argv = [binary, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    if not network:
        argv.append("--unshare-net")
    try:
        done = subprocess.run(
            [*argv, "--", "/bin/true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be started ({exc})"
    if done.returncode != 0:
        problem = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return f"bubblewrap does not work here ({problem[-1] if problem else done.returncode})"
    return None


def describe() -> str:
    """One line saying how tool processes are confined on this worker."""
    rules = policy()
    if rules.mode == "off":
        return (
            "tool processes are not confined (OPENFLOW_TOOL_SANDBOX=off): bash can write "
            "wherever the worker can and read $OPENFLOW_HOME"
        )
    reason = unavailable(rules.network)
    if reason is None:
        network = "on" if rules.network else "off"
        return (
            "tool processes are confined with bubblewrap: they write only to the execution "
            f"folder and /tmp, $OPENFLOW_HOME is hidden, network {network}"
        )
    if rules.mode == "required":
        return (
            f"tool processes cannot be confined: {reason}; bash and ast-grep are refused "
            "(OPENFLOW_TOOL_SANDBOX=required) — install bubblewrap"
        )
    return (
        f"tool processes are NOT confined: {reason}; bash can write wherever the worker can "
        "and read $OPENFLOW_HOME — install bubblewrap, or set OPENFLOW_TOOL_SANDBOX=required "
        "to refuse running them"
    )


_ANNOUNCED = False


def announce() -> None:
    """Log, once per process, how tool processes are confined (a warning when they are not)."""
    global _ANNOUNCED
    if _ANNOUNCED:
        return
    _ANNOUNCED = True
    try:
        line = describe()
        confined = line.startswith("tool processes are confined")
    except PermissionDenied as exc:
        line, confined = exc.detail, False
    if confined:
        logger.info(line)
    else:
        logger.warning(line)


def jail_for(ctx: ToolContext, tool: str) -> Jail | None:
    """The confinement of a tool process for this call, None when it runs unconfined.

    Raises PermissionDenied when confinement is required and unavailable.
    """
    rules = policy()
    if rules.mode == "off":
        return None
    reason = unavailable(rules.network)
    if reason is not None:
        if rules.mode == "required":
            raise PermissionDenied(
                f"{tool}: this worker runs tool processes only when they can be confined "
                f"(OPENFLOW_TOOL_SANDBOX=required), and {reason} — ask the operator to "
                "install bubblewrap; the file tools (read, write, edit, search) still work"
            )
        return None
    binary = bwrap_binary()
    assert binary is not None
    root = Path(os.path.realpath(ctx.execution_dir))
    hidden = [openflow_home(), *([ctx.home] if ctx.home is not None else []), *rules.hidden]
    return Jail(
        prefix=tuple(_bwrap_args(binary, root, _tmp_of(ctx, root), hidden, rules)),
        env={"TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"},
    )


def _tmp_of(ctx: ToolContext, root: Path) -> Path | None:
    """The run's own temporary folder, or None for a private in-memory /tmp."""
    run_dir = Path(os.path.realpath(ctx.run_dir))
    if run_dir == root or _below(run_dir, root):
        return None  # it would land in the execution folder
    tmp = run_dir / "tmp"
    try:
        tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return tmp


def _below(path: Path, folder: Path) -> bool:
    return path != folder and path.is_relative_to(folder)


def _bwrap_args(
    binary: str, root: Path, tmp: Path | None, hidden: Sequence[Path], rules: Policy
) -> list[str]:
    args = [binary, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args.append("--unshare-cgroup-try")
    if not rules.network:
        args.append("--unshare-net")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    mounts: list[tuple[Path, list[str]]] = []
    mounts.append(
        (Path("/tmp"), ["--bind", os.fspath(tmp), "/tmp"] if tmp else ["--tmpfs", "/tmp"])
    )
    remount: list[str] = []
    seen: set[Path] = set()
    for raw in hidden:
        path = Path(os.path.realpath(raw))
        if path in seen or path in (Path("/"), root):
            continue
        if _below(path, Path("/tmp")) and not _below(path, root):
            continue  # /tmp is replaced as a whole
        seen.add(path)
        if path.is_dir():
            mounts.append((path, ["--tmpfs", os.fspath(path)]))
            remount += ["--remount-ro", os.fspath(path)]
        elif path.exists():
            mounts.append((path, ["--ro-bind", "/dev/null", os.fspath(path)]))
    mounts.append((root, ["--bind", os.fspath(root), os.fspath(root)]))
    for _, op in sorted(mounts, key=lambda m: len(m[0].parts)):
        args += op
    return args + remount


__all__ = ["DEFAULT_HIDDEN", "Jail", "Policy", "announce", "describe", "jail_for", "policy"]
