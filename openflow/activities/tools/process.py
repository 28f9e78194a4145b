"""Child processes that cannot see the worker's secrets.

Three mechanisms work together:

* The worker marks itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, see `harden_process`).
  The kernel then refuses `/proc/<worker>/environ` and `/proc/<worker>/mem` to every process
  that lacks CAP_SYS_PTRACE, even one running as the same user.
* Tool processes die with their worker, even on kill -9: they start through a tiny launcher
  that leads the process group, asks the kernel to tell it when the worker dies
  (`PR_SET_PDEATHSIG`), and then kills its whole tree (the command, the command's children,
  and orphaned descendants, which come back to it as a child subreaper). A worker killed
  mid-batch leaves no command running on after the run settled the batch. MCP stdio servers
  start through the same launcher (`supervised`).
* For tool processes, the launcher also drops CAP_SYS_PTRACE and the other capabilities that
  read foreign memory (from the bounding, inheritable, permitted and effective sets) before it
  starts the command. That closes the gap when the worker runs as root in a container with
  full capabilities. The launcher refuses to run the command when it cannot drop them. It
  waits for the command (signals sent to the group reach the command) and exits as it did.
* Where bubblewrap works, tool processes are confined too: the launcher runs inside the jail
  (`confine.py`), bubblewrap dies with the worker (`--die-with-parent`) and the jail's process
  namespace ends every process the command started.

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

# Runs as `python -I -S -c _LAUNCHER MODE argv...`: isolated from PYTHON* variables and
# site-packages. MODE "tool" also drops the capabilities that read foreign memory; "server"
# (an MCP server) keeps what it was given.
_LAUNCHER = r"""
import ctypes, os, signal, sys
mode, argv = sys.argv[1], sys.argv[2:]
if not sys.platform.startswith("linux"):
    os.execvp(argv[0], argv)
libc = ctypes.CDLL(None, use_errno=True)
parent = os.getppid()
if os.getpgrp() != os.getpid():
    os.setpgid(0, 0)
# The worker's death reaches this launcher as SIGUSR1 (PR_SET_PDEATHSIG), even on kill -9.
libc.prctl(1, signal.SIGUSR1, 0, 0, 0)
if os.getppid() != parent:
    os._exit(125)
if mode == "tool":
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
# Orphaned descendants (a daemon that left the group) come back to this launcher.
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
me = os.getpid()
child = os.fork()
if child == 0:
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != me:
        os._exit(125)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"openflow: cannot run {argv[0]!r}: {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(127)


def descendants():
    found, todo = [], [me]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for kid in kids:
                if kid not in found:
                    try:
                        os.kill(kid, signal.SIGSTOP)  # no more forks while the tree is walked
                    except OSError:
                        continue
                    found.append(kid)
                    todo.append(kid)
    return found


def worker_died(signum, frame):
    if os.getppid() == parent:
        return  # a command signalling its own group, not the worker's death
    killed = set()
    for _ in range(100):
        # Again until nothing new: a child of a process that died meanwhile comes back here.
        fresh = [pid for pid in descendants() if pid not in killed]
        if not fresh:
            break
        for pid in fresh:
            killed.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os.killpg(0, signal.SIGKILL)


libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: the command's $PPID is as closed as the worker
signal.signal(signal.SIGUSR1, worker_died)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    # Meant for the command, which has them too (a group signal): wait for it to exit.
    signal.signal(sig, lambda signum, frame: None)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
if os.getppid() != parent:
    worker_died(signal.SIGUSR1, None)
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        os._exit(0)
    if pid == child:
        break
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(me, sig)
    os._exit(128 + sig)
os._exit(os.waitstatus_to_exitcode(status))
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

    With a `jail` the launcher itself runs inside bubblewrap (see `confine.py`), so the
    command's parent is the launcher, which cannot be read, and never bubblewrap.
    """
    ensure_hardened()
    command = [sys.executable, "-I", "-S", "-c", _LAUNCHER, "tool", *argv]
    full_env = dict(env)
    if jail is not None:
        command = jail.wrap(command, cwd)
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


def supervised(argv: Sequence[str]) -> list[str]:
    """`argv` run through the launcher, so that it dies with this process (MCP servers)."""
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, "server", *argv]


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group (the command, its children and grandchildren)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


__all__ = [
    "ensure_hardened",
    "harden_process",
    "is_hardened",
    "kill_group",
    "spawn",
    "supervised",
    "tool_env",
]
