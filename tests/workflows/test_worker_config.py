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


def test_every_cached_run_shares_one_json_converter() -> None:
    """The SDK makes a payload converter for each workflow it caches: they share one JSON
    converter (and its type adapters), and write the very bytes pydantic's stock one does."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.converter import WorkflowSerializationContext

    from openflow import contracts as c
    from openflow.payloads import data_converter

    first, second = (data_converter._new_payload_converter() for _ in range(2))
    assert first is not second
    # The composite under the SDK's wrapper is the process's one, whatever the context.
    inner = first._inner_payload_converter  # type: ignore[attr-defined]
    assert second._inner_payload_converter is inner  # type: ignore[attr-defined]
    context = WorkflowSerializationContext(namespace="default", workflow_id="wf")
    assert inner.with_context(context) is inner
    value = c.Action(kind="input", node_id="busy", text="that one")
    stock = pydantic_data_converter.payload_converter.to_payloads([value])
    assert first.to_payloads([value]) == stock
    [back] = second.from_payloads(stock, [c.Action])
    assert back == value
    jsons = {
        id(conv)
        for pc in (first, second)
        for conv in pc._inner_payload_converter.converters.values()  # type: ignore[attr-defined]
    }
    assert len(jsons) == len(first._inner_payload_converter.converters)  # type: ignore[attr-defined]
