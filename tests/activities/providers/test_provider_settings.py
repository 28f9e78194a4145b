"""settings.json: built-in profiles, user overrides, and keys that never leave by serialization."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openflow.activities.providers.common import parse_arguments
from openflow.settings import (
    BUILTIN_PROFILES,
    ProviderProfile,
    SettingsError,
    load_settings,
    openflow_home,
)

SPEC_IDS = {
    "openai",
    "openrouter",
    "groq",
    "together",
    "fireworks",
    "deepseek",
    "xai",
    "mistral",
    "perplexity",
    "gemini",
    "ollama",
    "lmstudio",
    "custom_openai_compatible",
    "anthropic",
    "bedrock",
    "scripted",
}


def write_settings(home: Path, data: object) -> None:
    (home / "settings.json").write_text(json.dumps(data), encoding="utf-8")


def test_missing_file_gives_every_built_in_profile(tmp_path: Path) -> None:
    settings = load_settings(tmp_path)
    assert set(settings.providers) == SPEC_IDS
    assert set(BUILTIN_PROFILES) == SPEC_IDS
    openai = settings.providers["openai"]
    assert (openai.kind, openai.transport, openai.default_model) == (
        "openai",
        "responses",
        "gpt-4o-mini",
    )
    assert (openai.api_key_env, openai.api_key_required) == ("OPENAI_API_KEY", True)
    assert openai.fast_mode_available
    assert settings.providers["ollama"].base_url == "http://localhost:11434/v1"
    assert settings.providers["ollama"].api_key_required is False
    assert settings.providers["lmstudio"].default_model == "local-model"
    assert settings.providers["anthropic"].default_model == "claude-3-5-sonnet-latest"
    assert settings.providers["bedrock"].default_model == "anthropic.claude-sonnet-4-20250514-v1:0"
    assert settings.providers["gemini"].api_key_env == "GEMINI_API_KEY"
    assert settings.providers["custom_openai_compatible"].api_key_required is False
    assert settings.providers["scripted"].kind == "scripted"
    for pid in SPEC_IDS - {"bedrock", "scripted"}:
        assert settings.providers[pid].base_url, pid


def test_user_profiles_layer_over_built_ins(tmp_path: Path) -> None:
    write_settings(
        tmp_path,
        {
            "active_provider": "local",
            "providers": {
                "anthropic": {"api_key": "sk-ant-stored", "default_model": "claude-sonnet-4-6"},
                "local": {
                    "base_url": "http://127.0.0.1:9000/v1",
                    "default_model": "qwen",
                    "model_transports": {"claude-proxy": "anthropic_messages"},
                    "reasoningEffortOptions": [{"value": "low", "label": "Low"}],
                    "fastModeAvailable": False,
                    "context_window_sizes": {"qwen": 32768},
                },
                "tests": {"script": {"draft": [{"submit": {"summary": "ok"}}]}},
            },
            "api_keys": {"tenant-key-1": "acme"},
            "prices": {"qwen": {"input": 0.1, "output": 0.2}},
            "some_future_setting": {"kept": True},
        },
    )
    settings = load_settings(tmp_path)
    anthropic = settings.providers["anthropic"]
    assert anthropic.secret_api_key() == "sk-ant-stored"
    assert anthropic.api_key_env == "ANTHROPIC_API_KEY", "built-in fields survive an override"
    assert anthropic.default_model == "claude-sonnet-4-6"
    local = settings.providers["local"]
    assert local.kind == "chat_completions"
    assert local.model_transports == {"claude-proxy": "anthropic_messages"}
    assert local.reasoning_effort_options[0].value == "low"
    assert local.context_window_sizes == {"qwen": 32768}
    assert settings.providers["tests"].kind == "scripted"
    assert settings.active_provider == "local"
    assert settings.tenant_for_key("tenant-key-1") == "acme"
    assert settings.tenant_for_key("nope") is None
    assert settings.prices["qwen"].output == 0.2
    assert settings.model_extra == {"some_future_setting": {"kept": True}}


def test_keys_never_show_in_repr_or_serialized_settings(tmp_path: Path) -> None:
    write_settings(
        tmp_path,
        {
            "providers": {"openai": {"api_key": "sk-secret-marker-123456"}},
            "api_keys": {"bearer-marker-abcdef": "acme"},
        },
    )
    settings = load_settings(tmp_path)
    for text in (
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        json.dumps(settings.model_dump(mode="json")),
        repr(settings.providers["openai"]),
        settings.providers["openai"].model_dump_json(by_alias=True),
    ):
        assert "sk-secret-marker-123456" not in text
        assert "bearer-marker-abcdef" not in text
    # A profile that travelled into a run comes back without a key.
    travelled = ProviderProfile.model_validate(settings.providers["openai"].model_dump())
    assert travelled.secret_api_key() is None


def test_masked_key_counts_as_no_key() -> None:
    profile = ProviderProfile(kind="openai", api_key="**********")  # type: ignore[arg-type]
    assert profile.secret_api_key() is None


def test_invalid_json_names_the_file_and_position(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"providers": {', encoding="utf-8")
    with pytest.raises(SettingsError, match=r"settings\.json' is not valid JSON \(line 1"):
        load_settings(tmp_path)


def test_invalid_field_names_the_field(tmp_path: Path) -> None:
    write_settings(tmp_path, {"providers": {"openai": {"request_timeout_secs": "soon"}}})
    with pytest.raises(SettingsError, match=r"providers\.openai\.request_timeout_secs"):
        load_settings(tmp_path)


def test_openflow_home_defaults_to_dot_openflow(tmp_path: Path) -> None:
    assert openflow_home({"OPENFLOW_HOME": str(tmp_path)}) == tmp_path
    assert openflow_home({}) == Path.home() / ".openflow"


def test_settings_json_nested_past_the_limit_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"providers": ' + "[" * 10_000 + "]" * 10_000 + "}")
    with pytest.raises(SettingsError, match="over the limit max_json_depth"):
        load_settings(tmp_path)


def test_tool_call_arguments_nested_past_the_limit_are_malformed() -> None:
    assert parse_arguments('{"a": ' + "[" * 129 + "]" * 129 + "}") is None
    assert parse_arguments('{"a": ' + "[" * 126 + "]" * 126 + "}") is not None


LEGACY_SETTINGS = (
    Path(__file__).resolve().parents[4]
    / "shared"
    / "compat"
    / "legacy"
    / "settings__e2e_ipc_mock_EMPTY_SETTINGS.json"
)


@pytest.mark.skipif(not LEGACY_SETTINGS.is_file(), reason=f"no {LEGACY_SETTINGS}")
def test_the_settings_shape_openflows_app_writes_loads(tmp_path: Path) -> None:
    from openflow.settings import load_settings

    (tmp_path / "settings.json").write_text(LEGACY_SETTINGS.read_text())
    settings = load_settings(tmp_path)
    assert settings.active_provider == "openai"
    openai = settings.profile("openai")
    compatible = settings.profile("custom_openai_compatible")
    assert openai is not None and compatible is not None
    assert (openai.kind, openai.default_model) == ("openai", "gpt-4.1-mini")
    assert (compatible.kind, compatible.base_url) == (
        "chat_completions",
        "https://example.invalid/v1",
    )
