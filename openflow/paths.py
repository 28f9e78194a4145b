"""Where OpenFlow keeps its files: `$OPENFLOW_HOME` and the project workflow folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

APP_WORKFLOWS_FILE = "workflows.json"
AGENTS_FILE = "agents.json"
PROJECT_WORKFLOWS_DIR = Path(".flow") / "workflows"
WORKFLOW_FILE_SUFFIX = ".workflow.json"


def openflow_home(env: Mapping[str, str] | None = None) -> Path:
    """`$OPENFLOW_HOME`, defaulting to `~/.openflow`."""
    from openflow.settings import runtime_settings  # settings.py re-exports this function

    return runtime_settings(env, only=("home",)).home


def app_workflows_path(home: Path) -> Path:
    """The app workflow store, `<home>/workflows.json`."""
    return home / APP_WORKFLOWS_FILE


def agents_path(home: Path) -> Path:
    """The saved agents file, `<home>/agents.json`."""
    return home / AGENTS_FILE


def project_workflows_dir(project_dir: Path) -> Path:
    """The project workflow folder, `<project>/.flow/workflows`."""
    return project_dir / PROJECT_WORKFLOWS_DIR


__all__ = [
    "AGENTS_FILE",
    "APP_WORKFLOWS_FILE",
    "PROJECT_WORKFLOWS_DIR",
    "WORKFLOW_FILE_SUFFIX",
    "agents_path",
    "app_workflows_path",
    "openflow_home",
    "project_workflows_dir",
]
