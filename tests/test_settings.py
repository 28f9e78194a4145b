"""RuntimeSettings: every OPENFLOW_* variable in one model, read by name, bad values in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openflow.settings import RuntimeSettings, SettingsError, runtime_settings

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_variable_the_readme_lists_is_a_settings_field() -> None:
    listed = set(re.findall(r"^\| `(OPENFLOW_[A-Z_]+)`", README.read_text(), re.MULTILINE))
    assert "OPENFLOW_HOME" in listed
    fields = {f"OPENFLOW_{name.upper()}" for name in RuntimeSettings.model_fields}
    assert listed <= fields, listed - fields


def test_a_part_reading_one_variable_is_not_stopped_by_another_bad_one() -> None:
    env = {"OPENFLOW_TOOL_BUDGET": "lots", "OPENFLOW_TASK_QUEUE": "ops"}
    assert runtime_settings(env, only=("task_queue",)).task_queue == "ops"
    with pytest.raises(SettingsError) as caught:
        runtime_settings(env)
    assert str(caught.value).startswith("OPENFLOW_TOOL_BUDGET='lots': ")
    assert "\n" not in str(caught.value)


def test_empty_variables_count_as_unset() -> None:
    env = {"OPENFLOW_HOME": "", "OPENFLOW_DATABASE_URL": "  ", "OPENFLOW_WORKFLOW_SANDBOX": " "}
    settings = runtime_settings(env)
    assert settings.home == Path.home() / ".openflow"
    assert settings.database_url is None
    assert settings.workflow_sandbox is False


def test_secrets_in_variables_stay_out_of_repr_and_errors() -> None:
    env = {
        "OPENFLOW_DATABASE_URL": "postgresql://openflow:hunter2@db:5432/openflow",
        "OPENFLOW_API_KEYS": "sk-very-secret=ops",
    }
    settings = runtime_settings(env)
    assert "hunter2" not in repr(settings) and "sk-very-secret" not in repr(settings)
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value().endswith("@db:5432/openflow")
    with pytest.raises(SettingsError) as caught:
        runtime_settings({**env, "OPENFLOW_UI_URL": "ftp://user:pw@host"})
    assert "pw" not in str(caught.value)


def test_a_variable_changed_in_the_process_is_read_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENFLOW_TRACE_CONTENT", "0")
    assert runtime_settings(only=("trace_content",)).trace_content is False
    assert runtime_settings(only=("trace_content",)).trace_content is False
    monkeypatch.setenv("OPENFLOW_TRACE_CONTENT", "1")
    assert runtime_settings(only=("trace_content",)).trace_content is True
    monkeypatch.setenv("OPENFLOW_TOOL_BUDGET", "lots")
    with pytest.raises(SettingsError, match="OPENFLOW_TOOL_BUDGET"):
        runtime_settings()
    monkeypatch.setenv("OPENFLOW_TOOL_BUDGET", "3")
    assert runtime_settings().tool_budget == 3
