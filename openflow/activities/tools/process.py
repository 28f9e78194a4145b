"""Child processes that cannot see the worker's secrets.

Two mechanisms work together:

* The worker marks itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, see `harden_process`).
  The kernel then refuses `/proc/<worker>/environ` and `/proc/<worker>/mem` to every process
  that lacks CAP_SYS_PTRACE, even one running as the same user.
* Tool processes die with their worker (`PR_SET_PDEATHSIG`): a worker killed mid-batch leaves
  no command running on after the run settled the batch's outcome as unknown.
* Tool processes start through a tiny launcher that drops CAP_SYS_PTRACE and the other
  capabilities that read foreign memory (from the bounding, inheritable, permitted and
  effective sets), then `exec`s the command in place. That closes the gap when the worker runs
  as root in a container with full capabilities. The launcher refuses to run the command when
  it cannot drop them. Because it `exec`s, the command's parent process is the worker itself.

The environment of a tool process is built explicitly (`tool_env`), never inherited.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openflow.activities.tools.confine import Jail

logger = logging.getLogger(__name__)

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Runs as `python -I -S -c _LAUNCHER argv...`: isolated from PYTHON* variables and site-packages.
_LAUNCHER = r"""
import ctypes, os, sys
if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_PDEATHSIG: the command dies with its worker, so a crashed worker leaves no tool
    # running that could still act after the run settled its outcome as unknown.
    parent = os.getppid()
    libc.prctl(1, 9, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(125)
    # sys_module, sys_rawio, sys_ptrace, sys_admin, perfmon, bpf, checkpoint_restore
    drop = (16, 17, 19, 21, 38, 39, 40)
    for cap in drop:
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; fails harmlessly when not held
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    header = Header(0x20080522, 0)
    data = (Data * 2)()
    if libc.capget(ctypes.byref(header), data) == 0:
        for cap in drop:
            word, bit = divmod(cap, 32)
            mask = ~(1 << bit) & 0xFFFFFFFF
            data[word].effective &= mask
            data[word].permitted &= mask
            data[word].inheritable &= mask
        libc.capset(ctypes.byref(header), data)
    caps = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("CapEff", "CapPrm", "CapBnd"):
                caps[key] = int(value.strip(), 16)
    ptrace = 1 << 19
    held = (caps.get("CapEff", 0) | caps.get("CapPrm", 0)) & ptrace
    regained = os.geteuid() == 0 and caps.get("CapBnd", 0) & ptrace
    if held or regained:
        sys.stderr.write(
            "openflow: could not drop CAP_SYS_PTRACE for the tool process; refusing to run it. "
            "Run the worker with CAP_SETPCAP or without CAP_SYS_PTRACE.\n"
        )
        sys.stderr.flush()
        os._exit(126)
if sys.argv[1] != "--supervise":
    os.execv(sys.argv[1], sys.argv[1:])
# Inside a jail the command's parent would be bubblewrap, whose memory any process of the
# user may read; stay as a parent that cannot be read, and pass the command's status on.
child = os.fork()
if child == 0:
    if sys.platform.startswith("linux"):
        libc.prctl(1, 9, 0, 0, 0)
    os.execv(sys.argv[2], sys.argv[2:])
if sys.platform.startswith("linux"):
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
import _signal  # not `signal`, which imports enum: tens of ms at every start
for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
    _signal.signal(sig, lambda n, _f: os.kill(child, n))
while True:
    try:
        _, status = os.waitpid(child, 0)
        break
    except ChildProcessError:
        os._exit(1)
    except InterruptedError:
        continue
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    _signal.signal(sig, _signal.SIG_DFL)
    os.kill(os.getpid(), sig)
os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def harden_process() -> bool:
    """Make this process's environment unreadable to the tool processes it starts.

    Call once at worker start. Returns False on platforms without `prctl` (nothing changed).
    """
    if not sys.platform.startswith("linux"):
        logger.warning(
            "process hardening is only available on Linux; tool processes may read "
            "this process's environment through the OS"
        )
        return False
    libc = _libc()
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(errno)}")
    return True


def is_hardened() -> bool:
    """Whether `harden_process` is in effect for this process."""
    if not sys.platform.startswith("linux"):
        return False
    return int(_libc().prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0


def ensure_hardened() -> None:
    """Harden the process now if the worker entry point has not done it yet."""
    if sys.platform.startswith("linux") and not is_hardened():
        harden_process()


def tool_env(base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of a tool process: the run's env, a few basics, the call's env."""
    env = {str(k): str(v) for k, v in base.items()}
    env.setdefault("PATH", os.environ.get("PATH", _DEFAULT_PATH))
    env.setdefault("HOME", os.environ.get("HOME", "/"))
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("PAGER", "cat")
    env.setdefault("GIT_PAGER", "cat")
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    merge_stderr: bool = True,
    jail: Jail | None = None,
) -> asyncio.subprocess.Process:
    """Start `argv` in its own process group, through the launcher, with exactly `env`.

    With a `jail` the launcher itself runs inside bubblewrap (see `confine.py`).
    """
    ensure_hardened()
    command = [sys.executable, "-I", "-S", "-c", _LAUNCHER, *argv]
    full_env = dict(env)
    if jail is not None:
        command = jail.wrap([*command[:5], "--supervise", *argv], cwd)
        full_env.update({k: v for k, v in jail.env.items() if k not in env or k == "TMPDIR"})
    return await asyncio.create_subprocess_exec(
        *command,
        cwd=os.fspath(cwd),
        env=full_env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        start_new_session=True,
    )


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group (the command, its children and grandchildren)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


__all__ = ["ensure_hardened", "harden_process", "is_hardened", "kill_group", "spawn", "tool_env"]
