"""How the worker runs OpenFlowRun: without the sandbox unless asked, under a readable build id."""

from __future__ import annotations

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from openflow.worker import build_id, workflow_runner


def test_the_sandbox_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENFLOW_WORKFLOW_SANDBOX", raising=False)
    assert isinstance(workflow_runner(), UnsandboxedWorkflowRunner)
    assert isinstance(workflow_runner(sandboxed=True), SandboxedWorkflowRunner)
    monkeypatch.setenv("OPENFLOW_WORKFLOW_SANDBOX", "1")
    assert isinstance(workflow_runner(), SandboxedWorkflowRunner)
    assert isinstance(workflow_runner(sandboxed=False), UnsandboxedWorkflowRunner)


def test_the_build_id_is_the_package_version() -> None:
    assert build_id().startswith("openflow-")
    assert len(build_id()) < 32
