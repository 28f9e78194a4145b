"""The workflow catalog (spec 1.1): the app store plus a project's workflow files.

The app store is `$OPENFLOW_HOME/workflows.json`; a project keeps one workflow per file in
`<project>/.flow/workflows/<id>.workflow.json` (not searched recursively). When both hold the
same id, the project file wins. Every write goes to a temporary file that is then renamed over
the target, so a crash never leaves half a file.

Errors:

    CatalogError                 a store cannot be read or written
    └── WorkflowNotFoundError    no workflow with that id in the catalog
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from openflow.engine.errors import LimitExceeded, WorkflowFormatError
from openflow.engine.limits import MAX_WORKFLOW_FILE_BYTES
from openflow.engine.spec import AppWorkflowStore, Workflow
from openflow.paths import (
    WORKFLOW_FILE_SUFFIX,
    app_workflows_path,
    openflow_home,
    project_workflows_dir,
)

logger = logging.getLogger(__name__)

Where = Literal["app", "project"]


class CatalogError(Exception):
    """A workflow store cannot be read or written."""


class WorkflowNotFoundError(CatalogError):
    """No workflow with the requested id is in the catalog."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is not in the catalog — list the catalog for the ids "
            "it holds"
        )
        self.workflow_id = workflow_id


@dataclass(frozen=True)
class CatalogEntry:
    """One workflow of the catalog and the file it comes from."""

    workflow: Workflow
    where: Where
    path: Path


@dataclass(frozen=True)
class SkippedFile:
    """A project workflow file the catalog could not use, and why."""

    path: Path
    reason: str


def read_workflow_bytes(path: Path) -> bytes:
    """A workflow file's bytes, never more than max_workflow_file_bytes of them.

    Raises LimitExceeded for a longer file (or an endless one, such as a device) without
    reading the rest, and OSError when the file cannot be read.
    """
    limit = MAX_WORKFLOW_FILE_BYTES.value
    with path.open("rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        size = _size(path)
        raise MAX_WORKFLOW_FILE_BYTES.error(
            "the workflow file",
            size if size > limit else limit + 1,
            "split the workflow or shorten its prompts",
        )
    return data


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class Catalog:
    """The merged view of the app store and one project's workflow files."""

    def __init__(self, home: Path | None = None, project_dir: Path | None = None) -> None:
        self.home = home if home is not None else openflow_home()
        self.project_dir = project_dir

    @property
    def app_store_path(self) -> Path:
        """`<home>/workflows.json`."""
        return app_workflows_path(self.home)

    @property
    def project_workflows_dir(self) -> Path | None:
        """`<project>/.flow/workflows`, or None without a project."""
        return None if self.project_dir is None else project_workflows_dir(self.project_dir)

    def entries(self) -> builtins.list[CatalogEntry]:
        """Every workflow with its origin: app store order, project files overriding in place."""
        merged: dict[str, CatalogEntry] = {
            wf.id: CatalogEntry(wf, "app", self.app_store_path)
            for wf in self._read_app_store().workflows
        }
        project_entries, _ = self._scan_project()
        for entry in project_entries:
            merged[entry.workflow.id] = entry
        return builtins.list(merged.values())

    def skipped_files(self) -> builtins.list[SkippedFile]:
        """Project workflow files left out of the catalog because they cannot be used."""
        _, skipped = self._scan_project()
        return skipped

    def entry(self, workflow_id: str) -> CatalogEntry:
        """The entry for `workflow_id`; raises WorkflowNotFoundError."""
        for entry in self.entries():
            if entry.workflow.id == workflow_id:
                return entry
        raise WorkflowNotFoundError(workflow_id)

    def get(self, workflow_id: str) -> Workflow:
        """The workflow with this id (the project's copy when both stores hold it)."""
        return self.entry(workflow_id).workflow

    def save(self, workflow: Workflow, where: Where = "app") -> Path:
        """Write the workflow to the app store or the project folder; returns the file written."""
        if where == "project":
            return self._save_project(workflow)
        if where != "app":
            raise CatalogError(f"cannot save to {where!r} — save to 'app' or 'project'")
        store = self._read_app_store()
        for index, existing in enumerate(store.workflows):
            if existing.id == workflow.id:
                store.workflows[index] = workflow
                break
        else:
            store.workflows.append(workflow)
        self._write_app_store(store)
        return self.app_store_path

    def delete(self, workflow_id: str) -> None:
        """Remove the workflow from both stores; raises WorkflowNotFoundError if neither has it."""
        removed = False
        store = self._read_app_store()
        kept = [wf for wf in store.workflows if wf.id != workflow_id]
        if len(kept) != len(store.workflows):
            store.workflows = kept
            self._write_app_store(store)
            removed = True
        project_entries, _ = self._scan_project()
        for entry in project_entries:
            if entry.workflow.id == workflow_id:
                try:
                    entry.path.unlink()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise CatalogError(
                        f"cannot delete {entry.path}: {exc.strerror} — check the folder's "
                        "permissions"
                    ) from None
                removed = True
        if not removed:
            raise WorkflowNotFoundError(workflow_id)

    def list(self) -> builtins.list[Workflow]:
        """Every workflow of the catalog (see `entries` for the order)."""
        return [entry.workflow for entry in self.entries()]

    def _read_app_store(self) -> AppWorkflowStore:
        path = self.app_store_path
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return AppWorkflowStore()
        except OSError as exc:
            raise CatalogError(
                f"cannot read the app workflow store {path}: {exc.strerror} — check the "
                "file's permissions"
            ) from None
        try:
            return AppWorkflowStore.load_json(text)
        except (WorkflowFormatError, LimitExceeded) as exc:
            raise CatalogError(
                f"cannot read the app workflow store {path}: {exc} (fix the file or move it "
                "aside; nothing was written)"
            ) from None

    def _write_app_store(self, store: AppWorkflowStore) -> None:
        text = json.dumps(store.to_json_dict(), indent=2, ensure_ascii=False) + "\n"
        _atomic_write(self.app_store_path, text)

    def _scan_project(self) -> tuple[builtins.list[CatalogEntry], builtins.list[SkippedFile]]:
        folder = self.project_workflows_dir
        if folder is None or not folder.is_dir():
            return [], []
        entries: builtins.list[CatalogEntry] = []
        skipped: builtins.list[SkippedFile] = []
        seen: dict[str, Path] = {}
        for path in sorted(folder.glob(f"*{WORKFLOW_FILE_SUFFIX}")):
            if not path.is_file():
                continue
            try:
                workflow = Workflow.load_json(read_workflow_bytes(path))
            except OSError as exc:
                skipped.append(SkippedFile(path, f"cannot read the file: {exc.strerror}"))
                continue
            except (WorkflowFormatError, LimitExceeded) as exc:
                skipped.append(SkippedFile(path, str(exc)))
                continue
            if workflow.id in seen:
                skipped.append(
                    SkippedFile(
                        path,
                        f"workflow id {workflow.id!r} is already defined in "
                        f"{seen[workflow.id].name} — give one of them another id",
                    )
                )
                continue
            seen[workflow.id] = path
            entries.append(CatalogEntry(workflow, "project", path))
        for item in skipped:
            logger.warning("skipping project workflow file %s: %s", item.path, item.reason)
        return entries, skipped

    def _save_project(self, workflow: Workflow) -> Path:
        folder = self.project_workflows_dir
        if folder is None:
            raise CatalogError(
                "no project folder is set — open the catalog with a project directory to "
                "save workflows there"
            )
        _check_file_stem(workflow.id)
        project_entries, _ = self._scan_project()
        path = next(
            (e.path for e in project_entries if e.workflow.id == workflow.id),
            folder / f"{workflow.id}{WORKFLOW_FILE_SUFFIX}",
        )
        _atomic_write(path, workflow.to_json())
        return path


def _check_file_stem(workflow_id: str) -> None:
    if (
        not workflow_id.strip()
        or workflow_id in {".", ".."}
        or any(ch in workflow_id for ch in "/\\\x00")
    ):
        raise CatalogError(
            f"workflow id {workflow_id!r} cannot name a project file — use an id without "
            "slashes, backslashes or NUL that is not '.' or '..'"
        )


def _atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CatalogError(
            f"cannot write {path}: {exc.strerror} — check the folder's permissions"
        ) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise CatalogError(
            f"cannot write {path}: {exc.strerror} — check the folder's permissions and free space"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


__all__ = [
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "SkippedFile",
    "Where",
    "WorkflowNotFoundError",
    "read_workflow_bytes",
]
