"""Chaos scenarios: the model's tools asked to leave the run's folder, and the planted-secret scan."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.chaos import (
    PROVIDER_SECRET,
    SECRETS,
    TENANT,
    TENANT_SECRET,
    Campaign,
    Plan,
    Tally,
    make_workflow,
    yolo_node,
)
from openflow.engine.events import ToolCompleted

OUTSIDE_SECRET = "outside-secret-" + "9d61c0a4e2b7f538"


# --- path escapes ---------------------------------------------------------------------------


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


FLIPPER = """import ctypes, os, time

# Swap d (a folder inside) and d_alt (a link to outside) atomically, as fast as possible.
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir("d")
os.symlink({outside!r}, "d_alt")
with open("flipper.pid", "w") as f:
    f.write(str(os.getpid()))
end = time.time() + 120
while not os.path.exists("stop-flipper") and time.time() < end:
    for _ in range(200):
        libc.renameat2(-100, b"d", -100, b"d_alt", 2)
"""
"""A process the model starts with `bash`: it flips `d` between a folder and a link outside."""


def escape_script(folder: Path, outside: Path, home: Path, race_calls: int) -> list[Any]:
    """The model's turns: every way out it can try, one call id per attempt."""
    rel = os.path.relpath(outside, folder)
    rel_home = os.path.relpath(home, folder)
    canary = "CANARY line"

    def edit(call_id: str, path: str) -> dict[str, Any]:
        edits = [{"old_text": canary, "new_text": f"EDITED-{call_id}"}]
        return _call(call_id, "edit", path=path, edits=edits)

    static = [
        _call("read-rel", "read", path=f"{rel}/secret.txt"),
        _call("read-abs", "read", path=f"{outside}/secret.txt"),
        _call("read-settings-abs", "read", path=f"{home}/settings.json"),
        _call("read-settings-rel", "read", path=f"{rel_home}/settings.json"),
        _call("write-rel", "write", path=f"{rel}/new-write-rel.txt", content="x"),
        _call("write-abs", "write", path=f"{outside}/new-write-abs.txt", content="x"),
        edit("edit-rel", f"{rel}/canary.txt"),
        edit("edit-abs", f"{outside}/canary.txt"),
    ]
    links = (
        f"ln -s {outside} link; ln -s {outside}/canary.txt linkfile; "
        f"ln -s {outside}/secret.txt linksecret; ln {outside}/canary.txt hard; "
        f"ln {outside}/secret.txt hardsecret; true"
    )
    through_links = [
        _call("read-symlink-dir", "read", path="link/secret.txt"),
        _call("read-symlink-file", "read", path="linksecret"),
        _call("read-hardlink", "read", path="hardsecret"),
        edit("edit-symlink-file", "linkfile"),
        edit("edit-hardlink", "hard"),
    ]
    writes_through_links = [
        _call("write-symlink-dir", "write", path="link/new-write-symlink-dir.txt", content="x"),
        _call("write-symlink-file", "write", path="linkfile", content="EDITED-write-symlink-file"),
        _call("write-hardlink", "write", path="hard", content="EDITED-write-hardlink"),
    ]
    flipper = (
        f"cat > chaos_flipper.py <<'EOF'\n{FLIPPER.format(outside=str(outside))}EOF\n"
        f"setsid {sys.executable} chaos_flipper.py >/dev/null 2>&1 </dev/null &\n"
        "while [ ! -e flipper.pid ]; do sleep 0.1; done; echo started"
    )
    race = []
    for i in range(race_calls):
        kind = i % 3
        if kind == 0:
            race.append(_call(f"race-write-{i}", "write", path=f"d/x-{i}.txt", content=f"R{i}"))
        elif kind == 1:
            race.append(_call(f"race-read-{i}", "read", path="d/secret.txt"))
        else:
            race.append(edit(f"race-edit-{i}", "d/canary.txt"))
    batches = [race[i : i + 10] for i in range(0, len(race), 10)]
    return [
        {"tools": static},
        {"tools": [_call("plant-links", "bash", command=links)]},
        {"tools": through_links},
        {"tools": writes_through_links},
        {"tools": [_call("bash-settings", "bash", command=f"cat {home}/settings.json; env")]},
        {"tools": [_call("flipper", "bash", command=flipper)]},
        *({"tools": batch} for batch in batches),
        {"tools": [_call("stop-flipper", "bash", command="touch stop-flipper")]},
        {"submit": {"summary": "tried every way out"}},
    ]


def _alive(pid_file: Path) -> bool:
    """Whether the flipper the run started is still going (its pid, still running its loop)."""
    try:
        cmdline = Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"chaos_flipper.py" in cmdline


def _outside_changes(outside: Path, expected: dict[str, str]) -> list[tuple[str, str]]:
    """(name, content) of every file outside that is new or changed."""
    changed = []
    for path in sorted(outside.rglob("*")):
        if path.is_file():
            content = path.read_text(errors="replace")
            if expected.get(path.name) != content:
                changed.append((path.name, content))
    return changed


async def path_escapes(campaign: Campaign, plan: Plan) -> list[Tally]:
    """The model's file tools asked to go outside the run's folder, directly and through links."""
    tally = Tally("path escapes")
    await campaign.ensure_worker()
    outside = campaign.root / "outside"
    outside.mkdir()
    expected = {"canary.txt": "CANARY line\n", "secret.txt": f"{OUTSIDE_SECRET}\n"}
    for name, content in expected.items():
        (outside / name).write_text(content)
    folder = campaign.folder("escape")
    turns = escape_script(folder, outside, campaign.home, plan.race_calls)
    profile = campaign.profile("escapes", {"probe": turns})
    wf = make_workflow("escapes", [yolo_node("probe")])
    run_id = await campaign.start(wf, profile, folder)
    status = await campaign.settle(run_id, deadline=180)
    tally.record(status == "completed", f"the probing run ended {status}")
    (folder / "stop-flipper").touch()
    end = time.monotonic() + 15
    while time.monotonic() < end and _alive(folder / "flipper.pid"):
        await asyncio.sleep(0.2)
    if _alive(folder / "flipper.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((folder / "flipper.pid").read_text()), signal.SIGKILL)
    events = await campaign.events(run_id)
    results = {e.tool_call_id: e.content for e in events if isinstance(e, ToolCompleted)}
    changes = _outside_changes(outside, expected)
    attempts = [
        call["id"]
        for turn in turns
        for call in turn.get("tools", [])
        if call["id"] not in ("plant-links", "flipper", "stop-flipper")
    ]
    blamed: set[str] = set()
    for call_id in attempts:
        problems = []
        content = results.get(call_id, "")
        if OUTSIDE_SECRET in content or "CANARY line" in content:
            problems.append("read the outside file")
        if any(s in content for s in SECRETS):
            problems.append("read a planted key")
        for name, text in changes:
            if (
                call_id in name
                or f"EDITED-{call_id}" in text
                or (
                    call_id.startswith("race-write-")
                    and f"x-{call_id.rsplit('-', 1)[1]}.txt" in name
                )
            ):
                problems.append(f"changed or created {name} outside")
                blamed.add(name)
        tally.record(not problems, f"{call_id}: {', '.join(problems)}")
    strays = [name for name, _ in changes if name not in blamed]
    tally.record(not strays, f"files appeared or changed outside: {', '.join(strays[:5])}")
    return [tally]


# --- planted secrets ------------------------------------------------------------------------


async def secret_scan(campaign: Campaign, plan: Plan) -> list[Tally]:
    """Every run's history and events, every log and response: no planted key anywhere."""
    tally = Tally("planted-secret scan")
    names = {PROVIDER_SECRET: "provider key", TENANT_SECRET: "tenant key"}

    def scan(place: str, text: str) -> None:
        found = [names[s] for s in SECRETS if s in text]
        tally.record(not found, f"{place}: {' and '.join(found)}")

    for run_id in sorted(set(campaign.run_ids)):
        try:
            histories = await campaign.histories(run_id)
        except Exception as exc:  # noqa: BLE001 - an unreadable history is a failed scan
            tally.record(False, f"{run_id} history unreadable: {exc}")
            continue
        scan(f"{run_id} history", "\n".join(histories))
        scan(f"{run_id} events", json.dumps(await campaign.raw_events(run_id)))
    for run_id in sorted(set(campaign.tenant_runs)):
        scan(f"{run_id} history", "\n".join(await campaign.histories(run_id)))
        scan(f"{run_id} events", json.dumps(await campaign.raw_events(run_id, TENANT)))
    for log in sorted(campaign.logs.glob("*.log")) + [campaign.server.log_path]:
        if log.exists():
            scan(f"log {log.name}", log.read_text(errors="replace"))
    for place, text in sorted(campaign.texts.items()):
        scan(place, text)
    return [tally]
