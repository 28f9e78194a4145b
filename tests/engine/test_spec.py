"""The workflow file format (spec 1): keys, aliases, defaults, lossless round trips, the catalog."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from openflow.catalog import Catalog, CatalogError, WorkflowNotFoundError
from openflow.engine.errors import WorkflowFormatError
from openflow.engine.spec import (
    DEFAULT_MARKDOWN_TEMPLATE,
    DEFAULT_OUTPUT_SCHEMA,
    MAX_BACKOFF_MS,
    AgentsFile,
    AppWorkflowStore,
    CallableAgent,
    JsonHandoff,
    LegacyHandoff,
    MarkdownHandoff,
    RetryPolicy,
    Workflow,
    callable_agent_purpose,
    effective_output_schema,
    missing_template_headings,
    submission_schema,
    template_headings,
)
from openflow.paths import openflow_home

COMPAT_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "compat"
COMPAT_FILES = sorted(COMPAT_DIR.glob("*.workflow.json")) if COMPAT_DIR.is_dir() else []

MINIMAL = {
    "id": "wf-min",
    "name": "Minimal",
    "nodes": [
        {
            "id": "first",
            "label": "First",
            "kind": "agent",
            "position": {"x": 0.0, "y": 0.0},
            "agent": {
                "system_prompt": "You summarise.",
                "task_prompt": "Summarise the entrypoint.",
                "model": "test-model",
                "output_schema": {"type": "object"},
            },
        }
    ],
    "edges": [],
}

# Spec 1.9: a workflow exactly as the app writes it, every default spelled out.
APP_WRITTEN = {
    "id": "feature-plan-demo",
    "name": "Feature planning demo",
    "nodes": [
        {
            "id": "idea",
            "label": "Clarify idea",
            "kind": "agent",
            "position": {"x": 80.0, "y": 120.0},
            "agent": {
                "system_prompt": "You clarify product ideas into concrete user value.",
                "task_prompt": "Read the initial idea and return target user, pain and outcome.",
                "model": "gpt-5.5",
                "output_schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "target_user": {"type": "string"},
                        "pain": {"type": "string"},
                        "outcome": {"type": "string"},
                    },
                    "required": ["target_user", "pain", "outcome"],
                },
                "handoff": {"format": "json"},
                "auto_start": True,
                "tools": {"approvalMode": "read_only", "allowStructuredUserInput": False},
                "callableAgents": [],
                "allowAllCallableAgents": False,
                "reasoningEffort": "medium",
                "reasoningBudgetTokens": None,
                "providerId": None,
                "requestUserInput": True,
                "conversationMode": False,
                "mcpResources": [],
                "mcpPrompts": [],
            },
        },
        {
            "id": "plan",
            "label": "Create plan",
            "kind": "agent",
            "position": {"x": 320.0, "y": 80.0},
            "agent": {
                "system_prompt": "...",
                "task_prompt": "...",
                "model": "",
                "output_schema": {
                    "type": "object",
                    "properties": {"slices": {"type": "array", "items": {"type": "string"}}},
                    "required": ["slices"],
                },
                "handoff": {
                    "format": "markdown",
                    "template": "# Handoff\n\n## Summary\n\n## Risks\n",
                },
                "auto_start": True,
                "tools": {},
                "callableAgents": ["agent-reviewer"],
                "allowAllCallableAgents": False,
                "reasoningEffort": None,
                "reasoningBudgetTokens": None,
                "providerId": "anthropic",
                "requestUserInput": False,
                "conversationMode": False,
                "mcpResources": [],
                "mcpPrompts": [],
            },
        },
    ],
    "edges": [{"id": "idea-plan", "from": "idea", "to": "plan"}],
    "settings": {
        "shared_context": "Follow the style guide.",
        "schedule": None,
        "retry_policy": {"max_attempts": 3, "backoff_ms": 1000},
        "provider_id": None,
        "reasoningEffort": None,
        "reasoningBudgetTokens": None,
        "fastMode": False,
        "forwardUpstreamReads": True,
        "planMode": None,
        "outputRepairModel": None,
    },
}


def minimal(**agent: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    data["nodes"][0]["agent"].update(agent)
    return data


def assert_keys_kept(original: Any, written: Any, path: str = "") -> None:
    """Every key of `original` is in `written`, recursively, with the same leaf values."""
    if isinstance(original, dict):
        assert isinstance(written, dict), path
        for key, value in original.items():
            assert key in written, f"{path}.{key} was dropped"
            if key == "kind" and value == "Agent":
                assert written[key] == "agent"
                continue
            assert_keys_kept(value, written[key], f"{path}.{key}")
    elif isinstance(original, list):
        assert isinstance(written, list) and len(written) == len(original), path
        for index, (a, b) in enumerate(zip(original, written, strict=True)):
            assert_keys_kept(a, b, f"{path}[{index}]")
    else:
        assert original == written, path


@pytest.mark.skipif(not COMPAT_FILES, reason=f"no compat workflows under {COMPAT_DIR}")
@pytest.mark.parametrize("path", COMPAT_FILES, ids=lambda p: p.name)
def test_compat_files_load_and_round_trip_without_losing_a_key(path: Path) -> None:
    original = json.loads(path.read_text(encoding="utf-8"))

    workflow = Workflow.load_json(path.read_text(encoding="utf-8"))
    written = workflow.to_json_dict()

    assert_keys_kept(original, written)
    again = Workflow.load_json(json.dumps(written))
    assert again == workflow
    assert again.to_json_dict() == written


def test_compat_file_with_legacy_kind_is_written_as_agent() -> None:
    data = minimal()
    data["nodes"][0]["kind"] = "Agent"

    written = Workflow.from_json_dict(data).to_json_dict()

    assert written["nodes"][0]["kind"] == "agent"


def test_app_written_workflow_round_trips_to_the_same_json() -> None:
    workflow = Workflow.from_json_dict(APP_WRITTEN)

    assert workflow.to_json_dict() == APP_WRITTEN


def test_minimal_workflow_gets_the_spec_defaults() -> None:
    workflow = Workflow.from_json_dict(MINIMAL)
    agent = workflow.nodes[0].agent

    assert isinstance(agent.handoff, JsonHandoff)
    assert agent.tools.approval_mode is None
    assert agent.tools.effective_approval_mode == "write"
    assert agent.tools.allow_structured_user_input is True
    assert agent.tools.allow_free_text_user_input is True
    assert agent.request_user_input is False
    assert agent.conversation_mode is False
    assert agent.auto_start is True
    assert agent.callable_agents == [] and agent.allow_all_callable_agents is False
    assert agent.reasoning_effort is None and agent.reasoning_budget_tokens is None
    assert agent.provider_id is None
    assert agent.mcp_resources == [] and agent.mcp_prompts == []
    assert agent.mcp_context_snapshots == []
    settings = workflow.settings
    assert settings.shared_context == ""
    assert settings.schedule is None
    assert (settings.retry_policy.max_attempts, settings.retry_policy.backoff_ms) == (3, 1000)
    assert settings.provider_id is None
    assert settings.fast_mode is False
    assert settings.forward_upstream_reads is True
    assert settings.plan_mode is None
    assert settings.output_repair_model is None
    assert settings.strict_layers is False


def test_defaults_are_written_in_the_apps_shape() -> None:
    written = Workflow.from_json_dict(MINIMAL).to_json_dict()
    agent = written["nodes"][0]["agent"]

    assert agent["handoff"] == {"format": "json"}
    assert agent["tools"] == {}
    assert "mcpContextSnapshots" not in agent
    assert written["settings"] == APP_WRITTEN["settings"] | {"shared_context": ""}
    assert "strictLayers" not in written["settings"]


def test_unknown_keys_survive_at_every_level() -> None:
    data = minimal(
        handoff={"format": "markdown", "template": "# H\n", "x-handoff": 1},
        tools={"approvalMode": "yolo", "catalog": {"tools": [{"name": "read"}]}},
        mcpResources=[{"serverId": "docs", "uri": "file:///a", "x-res": True}],
        futureAgentKey={"nested": [1, 2]},
    )
    data["x-top"] = "kept"
    data["nodes"][0]["x-node"] = [1]
    data["nodes"][0]["position"]["z"] = 3.5
    data["edges"] = []
    data["settings"] = {
        "maxConcurrentAiCalls": 1,
        "retry_policy": {"max_attempts": 1, "jitter": "full"},
        "schedule": {"cron": "0 9 * * 1", "x-sched": "y"},
    }

    written = Workflow.from_json_dict(data).to_json_dict()

    assert written["x-top"] == "kept"
    node = written["nodes"][0]
    assert node["x-node"] == [1]
    assert node["position"]["z"] == 3.5
    assert node["agent"]["futureAgentKey"] == {"nested": [1, 2]}
    assert node["agent"]["handoff"]["x-handoff"] == 1
    assert node["agent"]["tools"] == {
        "approvalMode": "yolo",
        "catalog": {"tools": [{"name": "read"}]},
    }
    assert node["agent"]["mcpResources"][0]["x-res"] is True
    assert written["settings"]["maxConcurrentAiCalls"] == 1
    assert written["settings"]["retry_policy"] == {
        "max_attempts": 1,
        "backoff_ms": 1000,
        "jitter": "full",
    }
    assert written["settings"]["schedule"] == {
        "cron": "0 9 * * 1",
        "enabled": True,
        "timezone": "",
        "x-sched": "y",
    }


@pytest.mark.parametrize(
    ("alias", "key", "value", "attribute"),
    [
        ("reasoning_effort", "reasoningEffort", "high", "reasoning_effort"),
        ("reasoning_budget_tokens", "reasoningBudgetTokens", 2048, "reasoning_budget_tokens"),
        ("request_user_input", "requestUserInput", True, "request_user_input"),
        ("conversation_mode", "conversationMode", True, "conversation_mode"),
        ("mcp_resources", "mcpResources", [], "mcp_resources"),
        ("mcp_prompts", "mcpPrompts", [], "mcp_prompts"),
    ],
)
def test_node_aliases_are_read_and_written_under_the_canonical_key(
    alias: str, key: str, value: Any, attribute: str
) -> None:
    workflow = Workflow.from_json_dict(minimal(**{alias: value}))

    assert getattr(workflow.nodes[0].agent, attribute) == value
    agent = workflow.to_json_dict()["nodes"][0]["agent"]
    assert agent[key] == value
    assert alias == key or alias not in agent


@pytest.mark.parametrize(
    ("alias", "key", "value"),
    [
        ("reasoning_effort", "reasoningEffort", "low"),
        ("reasoning_budget_tokens", "reasoningBudgetTokens", 1024),
        ("fast_mode", "fastMode", True),
        ("plan_mode", "planMode", {"evidenceSourceNodeId": "first"}),
        ("output_repair_model", "outputRepairModel", "repair-model"),
        ("strict_layers", "strictLayers", True),
    ],
)
def test_settings_aliases_are_read_and_written_under_the_canonical_key(
    alias: str, key: str, value: Any
) -> None:
    data = minimal()
    data["settings"] = {alias: value}

    settings = Workflow.from_json_dict(data).to_json_dict()["settings"]

    assert settings[key] == value
    assert alias not in settings


def test_strict_layers_is_written_only_when_on() -> None:
    data = minimal()
    data["settings"] = {"strictLayers": True}
    workflow = Workflow.from_json_dict(data)

    assert workflow.settings.strict_layers is True
    assert workflow.to_json_dict()["settings"]["strictLayers"] is True
    workflow.settings.strict_layers = False
    assert "strictLayers" not in workflow.to_json_dict()["settings"]


def test_tool_config_writes_only_what_differs_from_the_defaults() -> None:
    workflow = Workflow.from_json_dict(
        minimal(
            tools={
                "approvalMode": "always_ask",
                "allowStructuredUserInput": True,
                "allowFreeTextUserInput": False,
            }
        )
    )

    assert workflow.to_json_dict()["nodes"][0]["agent"]["tools"] == {
        "approvalMode": "always_ask",
        "allowFreeTextUserInput": False,
    }


def test_mcp_snapshots_are_written_when_present() -> None:
    snapshot = {"kind": "resource", "serverId": "docs", "source": "file:///a", "content": "hi"}

    agent = Workflow.from_json_dict(minimal(mcpContextSnapshots=[snapshot])).to_json_dict()[
        "nodes"
    ][0]["agent"]

    assert agent["mcpContextSnapshots"] == [
        snapshot | {"originalSizeBytes": 0, "includedSizeBytes": 0, "truncated": False},
    ]


def test_handoff_formats() -> None:
    markdown = Workflow.from_json_dict(minimal(handoff={"format": "markdown", "template": "# A\n"}))
    legacy = Workflow.from_json_dict(minimal(handoff={"format": "legacy"}))

    assert isinstance(markdown.nodes[0].agent.handoff, MarkdownHandoff)
    assert markdown.nodes[0].agent.handoff.template == "# A\n"
    assert isinstance(legacy.nodes[0].agent.handoff, LegacyHandoff)
    assert legacy.to_json_dict()["nodes"][0]["agent"]["handoff"] == {"format": "legacy"}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("nodes"), "nodes is missing"),
        (
            lambda d: d["nodes"][0]["agent"].pop("task_prompt"),
            "nodes[0].agent.task_prompt is missing",
        ),
        (lambda d: d["nodes"][0].update(kind="robot"), "nodes[0].kind"),
        (
            lambda d: d["nodes"][0]["agent"].update(handoff={"format": "pdf"}),
            "nodes[0].agent.handoff",
        ),
        (lambda d: d.update(edges=[{"id": "e", "from": "first"}]), "edges[0].to is missing"),
        (lambda d: d.update(id=7), "id:"),
    ],
)
def test_a_file_that_is_not_a_workflow_names_the_field(mutate: Any, expected: str) -> None:
    data = copy.deepcopy(MINIMAL)
    mutate(data)

    with pytest.raises(WorkflowFormatError) as caught:
        Workflow.load_json(json.dumps(data))

    message = str(caught.value)
    assert message.startswith("not an OpenFlow workflow: ")
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "not valid JSON"),
        ("{'id': 1}", "not valid JSON"),
        ('{"id": NaN}', "not valid JSON"),
        (b"\xff\xfe{", "not UTF-8"),
        ("[]", "got an array"),
        ('"workflow"', "got a string"),
        ("null", "got null"),
    ],
)
def test_text_that_is_not_a_workflow_object_is_one_clear_line(
    text: str | bytes, expected: str
) -> None:
    with pytest.raises(WorkflowFormatError) as caught:
        Workflow.load_json(text)

    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_utf8_bom_is_accepted() -> None:
    text = "\ufeff" + json.dumps(MINIMAL)

    assert Workflow.load_json(text.encode("utf-8")).id == "wf-min"


@pytest.mark.parametrize(
    ("schema", "verbatim"),
    [
        ({"type": "object"}, True),
        ({"properties": {"a": {"type": "string"}}}, True),
        ({"type": "object", "properties": {}, "required": []}, True),
        (None, False),
        ({}, False),
        ({"type": "string"}, False),
        ([{"type": "object"}], False),
        ("object", False),
    ],
)
def test_effective_output_schema_falls_back_to_summary(schema: Any, verbatim: bool) -> None:
    workflow = Workflow.from_json_dict(minimal(output_schema=schema))

    effective = effective_output_schema(workflow.nodes[0].agent)

    assert effective == (schema if verbatim else DEFAULT_OUTPUT_SCHEMA)


def test_effective_schema_is_a_copy() -> None:
    agent = Workflow.from_json_dict(minimal(output_schema=None)).nodes[0].agent

    effective_output_schema(agent)["properties"]["extra"] = {}

    assert "extra" not in effective_output_schema(agent)["properties"]


def test_submission_schema_is_markdown_for_markdown_handoffs() -> None:
    json_agent = Workflow.from_json_dict(minimal()).nodes[0].agent
    md_agent = Workflow.from_json_dict(minimal(handoff={"format": "markdown"})).nodes[0].agent

    assert submission_schema(json_agent) == {"type": "object"}
    schema = submission_schema(md_agent)
    assert schema["required"] == ["markdown"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["markdown"]["type"] == "string"
    assert md_agent.handoff == MarkdownHandoff(template=DEFAULT_MARKDOWN_TEMPLATE)


def test_default_template_headings() -> None:
    assert template_headings(DEFAULT_MARKDOWN_TEMPLATE) == [
        "# Handoff",
        "## Summary",
        "## Findings",
        "## Files",
        "## Risks",
        "## Recommended Next Step",
    ]


def test_template_headings_are_normalized() -> None:
    text = "  ##Title  \n####### too deep\n###\n#   Spaced   out  \nplain # text\r\n###### Six\r\n"

    assert template_headings(text) == ["## Title", "# Spaced   out", "###### Six"]


def test_missing_template_headings() -> None:
    done = "# Handoff\n\n## Summary\nAll good.\n## Risks\nNone.\n"

    assert missing_template_headings(DEFAULT_MARKDOWN_TEMPLATE, done) == [
        "## Findings",
        "## Files",
        "## Recommended Next Step",
    ]


def test_callable_agent_reads_camel_case_and_writes_snake_case() -> None:
    agent = CallableAgent.model_validate(
        {
            "id": "agent-reviewer",
            "name": "Reviewer",
            "systemPrompt": "You review.",
            "taskPrompt": "\n  Review the diff.  \nThen report.",
            "outputSchema": {"type": "object"},
            "autoStart": True,
            "x-agent": 1,
        }
    )

    assert agent.system_prompt == "You review."
    assert agent.auto_start is True
    assert isinstance(agent.handoff, JsonHandoff)
    assert callable_agent_purpose(agent) == "Review the diff."
    assert agent.purpose == "Review the diff."
    written = agent.model_dump(mode="json", by_alias=True)
    assert {"system_prompt", "task_prompt", "output_schema", "auto_start", "x-agent"} <= set(
        written
    )


def test_callable_agent_defaults_and_purpose_fallback() -> None:
    agent = CallableAgent.model_validate({"id": "a", "name": "A", "output_schema": None})

    assert (agent.system_prompt, agent.task_prompt, agent.model) == ("", "", "")
    assert agent.auto_start is False
    assert agent.tools.effective_approval_mode == "write"
    assert callable_agent_purpose(agent) == "Saved agent"


def test_agents_file_round_trips() -> None:
    text = json.dumps({"agents": [{"id": "a", "name": "A", "outputSchema": {}}], "version": 2})

    written = AgentsFile.load_json(text).to_json_dict()

    assert written["version"] == 2
    assert written["agents"][0]["output_schema"] == {}


def test_app_store_envelope_defaults_and_round_trip() -> None:
    empty = AppWorkflowStore.load_json('{"workflows": []}')
    store = AppWorkflowStore.load_json(
        json.dumps({"workflows": [MINIMAL], "seeded_examples": ["wf-min"], "x-store": 1})
    )

    assert empty.seeded_examples == []
    written = store.to_json_dict()
    assert written["seeded_examples"] == ["wf-min"]
    assert written["x-store"] == 1
    assert written["workflows"][0]["id"] == "wf-min"


def test_retry_policy_defaults_and_cap() -> None:
    assert RetryPolicy() == RetryPolicy(max_attempts=3, backoff_ms=1000)
    assert RetryPolicy.MAX_BACKOFF_MS == MAX_BACKOFF_MS == 30_000
    with pytest.raises(WorkflowFormatError, match="retry_policy.max_attempts"):
        data = minimal()
        data["settings"] = {"retry_policy": {"max_attempts": 256}}
        Workflow.from_json_dict(data)


def test_to_json_is_a_file_ready_text() -> None:
    text = Workflow.from_json_dict(MINIMAL).to_json()

    assert text.endswith("\n")
    assert Workflow.load_json(text) == Workflow.from_json_dict(MINIMAL)


# Spec 1.1: where workflows live. The app store plus a project's files; the project wins.


def store_text(*workflows: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"workflows": list(workflows), **extra}, indent=2)


def named(workflow_id: str, name: str) -> dict[str, Any]:
    return copy.deepcopy(MINIMAL) | {"id": workflow_id, "name": name}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    (path / ".flow" / "workflows").mkdir(parents=True)
    return path


def write_project_file(project: Path, file_name: str, data: dict[str, Any] | str) -> Path:
    path = project / ".flow" / "workflows" / file_name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_catalog_merges_and_the_project_wins_on_the_same_id(home: Path, project: Path) -> None:
    (home / "workflows.json").write_text(
        store_text(named("shared", "App copy"), named("app-only", "App only"))
    )
    write_project_file(project, "shared.workflow.json", named("shared", "Project copy"))
    write_project_file(project, "local.workflow.json", named("project-only", "Project only"))

    catalog = Catalog(home=home, project_dir=project)

    assert [(wf.id, wf.name) for wf in catalog.list()] == [
        ("shared", "Project copy"),
        ("app-only", "App only"),
        ("project-only", "Project only"),
    ]
    assert catalog.get("shared").name == "Project copy"
    assert catalog.entry("shared").where == "project"
    assert catalog.entry("app-only").where == "app"
    assert Catalog(home=home).get("shared").name == "App copy"


def test_catalog_reads_project_files_non_recursively_by_suffix(home: Path, project: Path) -> None:
    nested = project / ".flow" / "workflows" / "nested"
    nested.mkdir()
    (nested / "deep.workflow.json").write_text(json.dumps(named("deep", "Deep")))
    write_project_file(project, "notes.json", named("not-a-workflow-file", "Notes"))

    assert Catalog(home=home, project_dir=project).list() == []


def test_catalog_skips_unreadable_project_files_and_says_why(home: Path, project: Path) -> None:
    broken = write_project_file(project, "broken.workflow.json", "{not json")
    write_project_file(project, "good.workflow.json", named("good", "Good"))

    catalog = Catalog(home=home, project_dir=project)

    assert [wf.id for wf in catalog.list()] == ["good"]
    [skipped] = catalog.skipped_files()
    assert skipped.path == broken
    assert "not valid JSON" in skipped.reason


def test_catalog_without_files_is_empty(home: Path) -> None:
    catalog = Catalog(home=home)

    assert catalog.list() == []
    with pytest.raises(WorkflowNotFoundError, match="'missing'"):
        catalog.get("missing")


def test_saving_to_the_app_store_keeps_everything_else(home: Path) -> None:
    (home / "workflows.json").write_text(
        store_text(
            named("first", "First"), named("second", "Second"), seeded_examples=["first"], x=1
        )
    )
    catalog = Catalog(home=home)
    updated = catalog.get("first").model_copy(update={"name": "Renamed"})

    catalog.save(updated)
    catalog.save(Workflow.from_json_dict(named("third", "Third")))

    stored = json.loads((home / "workflows.json").read_text())
    assert [wf["name"] for wf in stored["workflows"]] == ["Renamed", "Second", "Third"]
    assert stored["seeded_examples"] == ["first"]
    assert stored["x"] == 1
    assert sorted(p.name for p in home.iterdir()) == ["workflows.json"]


def test_saving_creates_a_missing_home(tmp_path: Path) -> None:
    catalog = Catalog(home=tmp_path / "new-home")

    catalog.save(Workflow.from_json_dict(MINIMAL))

    assert Catalog(home=tmp_path / "new-home").get("wf-min").name == "Minimal"


def test_saving_to_the_project_writes_one_file_per_workflow(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "fresh-project"
    catalog = Catalog(home=home, project_dir=project)

    path = catalog.save(Workflow.from_json_dict(MINIMAL), where="project")

    assert path == project / ".flow" / "workflows" / "wf-min.workflow.json"
    assert json.loads(path.read_text())["id"] == "wf-min"
    assert [p.name for p in path.parent.iterdir()] == ["wf-min.workflow.json"]
    assert catalog.entry("wf-min").where == "project"


def test_saving_to_the_project_updates_the_file_that_holds_the_id(
    home: Path, project: Path
) -> None:
    existing = write_project_file(project, "custom-name.workflow.json", named("wf-min", "Old"))
    catalog = Catalog(home=home, project_dir=project)

    path = catalog.save(Workflow.from_json_dict(named("wf-min", "New")), where="project")

    assert path == existing
    assert catalog.get("wf-min").name == "New"


@pytest.mark.parametrize("bad_id", ["../escape", "a\\b", "..", " "])
def test_ids_that_cannot_name_a_project_file_are_refused(
    home: Path, project: Path, bad_id: str
) -> None:
    catalog = Catalog(home=home, project_dir=project)

    with pytest.raises(CatalogError, match="cannot name a project file"):
        catalog.save(Workflow.from_json_dict(named(bad_id, "Bad")), where="project")


def test_saving_to_the_project_needs_a_project(home: Path) -> None:
    with pytest.raises(CatalogError, match="no project folder"):
        Catalog(home=home).save(Workflow.from_json_dict(MINIMAL), where="project")


def test_a_corrupt_app_store_is_reported_and_never_overwritten(home: Path) -> None:
    (home / "workflows.json").write_text('{"workflows": [{"id": 1}]}')
    catalog = Catalog(home=home)

    with pytest.raises(CatalogError, match="workflows.json"):
        catalog.list()
    with pytest.raises(CatalogError):
        catalog.save(Workflow.from_json_dict(MINIMAL))
    assert (home / "workflows.json").read_text() == '{"workflows": [{"id": 1}]}'


def test_delete_removes_the_workflow_from_both_stores(home: Path, project: Path) -> None:
    (home / "workflows.json").write_text(store_text(named("shared", "App"), named("keep", "Keep")))
    project_file = write_project_file(project, "shared.workflow.json", named("shared", "Project"))
    catalog = Catalog(home=home, project_dir=project)

    catalog.delete("shared")

    assert [wf.id for wf in catalog.list()] == ["keep"]
    assert not project_file.exists()
    with pytest.raises(WorkflowNotFoundError):
        catalog.delete("shared")


def test_openflow_home_defaults_to_dot_openflow(tmp_path: Path) -> None:
    assert openflow_home({"OPENFLOW_HOME": str(tmp_path)}) == tmp_path
    assert openflow_home({}) == Path.home() / ".openflow"
    assert openflow_home({"OPENFLOW_HOME": "  "}) == Path.home() / ".openflow"


# --- the older shapes of ../shared/compat/legacy (its README says what OpenFlow does) -----

LEGACY_DIR = COMPAT_DIR / "legacy"
needs_legacy = pytest.mark.skipif(
    not LEGACY_DIR.is_dir(), reason=f"no legacy shapes under {LEGACY_DIR}"
)


def legacy(name: str) -> Any:
    return json.loads((LEGACY_DIR / name).read_text(encoding="utf-8"))


@needs_legacy
@pytest.mark.parametrize(
    "path", sorted(COMPAT_DIR.glob("*.v1.workflow.json")), ids=lambda p: p.name
)
def test_a_first_published_workflow_validates_like_the_current_one(path: Path) -> None:
    from openflow.engine.graph import workflow_problems

    v1 = Workflow.load_json(path.read_text(encoding="utf-8"))
    current = Workflow.load_json(
        (COMPAT_DIR / path.name.replace(".v1.", ".")).read_text(encoding="utf-8")
    )
    assert workflow_problems(v1) == [] and workflow_problems(current) == []
    assert sorted(n.id for n in v1.nodes) == sorted(n.id for n in current.nodes)


@needs_legacy
def test_a_legacy_camel_case_saved_agent_loads_with_the_defaults() -> None:
    agent = CallableAgent.model_validate(legacy("agent__legacy_camelcase_minimal.json"))
    assert (agent.id, agent.name, agent.output_schema) == ("agent-1", "Legacy", {"type": "object"})
    assert agent.tools.approval_mode is None
    assert isinstance(agent.handoff, JsonHandoff) and agent.auto_start is False
    assert agent.system_prompt == "" and agent.task_prompt == ""


@needs_legacy
def test_a_snake_case_saved_agent_loads_and_is_written_back_in_snake_case() -> None:
    data = legacy("agent__snake_case_fields.json")
    agents = AgentsFile.load_json(json.dumps({"agents": [data]}))
    [agent] = agents.agents
    assert agent.tools.approval_mode == "write" and agent.model == "gpt-test"
    [written] = agents.to_json_dict()["agents"]
    for key in ("system_prompt", "task_prompt", "output_schema", "auto_start"):
        assert key in written, key
    assert not {"systemPrompt", "taskPrompt", "outputSchema", "autoStart"} & set(written)


@needs_legacy
def test_a_legacy_minimal_node_config_loads_with_the_defaults() -> None:
    data = minimal()
    data["nodes"][0]["agent"] = legacy("agent_node_config__legacy_minimal.json")
    agent = Workflow.from_json_dict(data).nodes[0].agent
    assert agent.auto_start is True and agent.tools.approval_mode is None
    assert agent.callable_agents == [] and agent.allow_all_callable_agents is False
    assert isinstance(agent.handoff, JsonHandoff) and agent.conversation_mode is False


@needs_legacy
def test_request_user_input_false_is_kept_and_written_back_explicitly() -> None:
    data = minimal()
    data["nodes"][0]["agent"] = legacy("agent_node_config__request_user_input_false.json")
    written = Workflow.from_json_dict(data).to_json_dict()["nodes"][0]["agent"]
    assert written["requestUserInput"] is False


@needs_legacy
def test_legacy_workflow_settings_keys() -> None:
    from openflow.engine.spec import WorkflowSettings

    plan = WorkflowSettings.model_validate(legacy("workflow_settings__plan_mode.json"))
    assert plan.plan_mode is not None and plan.plan_mode.evidence_source_node_id == "freeze"
    assert plan.shared_context == "ctx"
    assert WorkflowSettings.model_validate({}).plan_mode is None
    stale = WorkflowSettings.model_validate(
        legacy("workflow_settings__stale_maxConcurrentAiCalls.json")
    )
    defaults = WorkflowSettings()
    assert all(
        getattr(stale, name) == getattr(defaults, name) for name in WorkflowSettings.model_fields
    )
    snake = WorkflowSettings.model_validate(
        legacy("workflow_settings__snake_output_repair_model.json")
    )
    assert snake.output_repair_model == "m2"
    assert snake.model_dump(mode="json", by_alias=True)["outputRepairModel"] == "m2"


@needs_legacy
@pytest.mark.parametrize(
    "name", ["submit_output_args__wrapped.json", "submit_output_args__flat_legacy.json"]
)
def test_both_submit_argument_forms_are_taken_as_the_output(name: str) -> None:
    from openflow.engine.classify import Completed, complete_submit

    args = legacy(name)
    done = complete_submit(args, json.dumps(args), DEFAULT_OUTPUT_SCHEMA, None)
    assert isinstance(done, Completed) and done.output == {"summary": "done"}
