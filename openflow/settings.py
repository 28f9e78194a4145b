"""`$OPENFLOW_HOME`, `settings.json` and provider profiles (OPENFLOW_SPEC 10.1, 10.2).

Keys are `SecretStr`: they never show in `repr`, and serializing a profile never writes them out,
so a profile can travel into a run without its key. Keys are resolved on the worker, inside the
model-turn activity.

Errors:
    SettingsError    settings.json exists but cannot be read or does not validate
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from openflow.contracts import WEBHOOK_EVENTS, WebhookEvent
from openflow.engine.errors import LimitExceeded
from openflow.engine.limits import check_json_text
from openflow.paths import openflow_home

ProviderKind = Literal["openai", "chat_completions", "anthropic", "bedrock", "scripted"]
Transport = Literal["responses", "chat_completions", "anthropic_messages"]

SETTINGS_FILE = "settings.json"


class SettingsError(Exception):
    """settings.json cannot be read or is invalid."""


class ModelPrice(BaseModel):
    """USD per million tokens for one model."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None
    cache_write: float | None = None


class ReasoningEffortOption(BaseModel):
    """One reasoning effort a provider offers in the UI."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    value: str
    label: str = ""
    uses_budget_tokens: bool = False


class ProviderProfile(BaseModel):
    """One provider profile from settings.json (OpenFlow's keys, mostly snake_case)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    kind: ProviderKind = "chat_completions"
    display_name: str = ""
    base_url: str | None = None
    transport: Transport | None = None
    responses_path: str = "v1/responses"
    chat_completions_path: str = "v1/chat/completions"
    request_timeout_secs: float = 300
    known_models: list[str] = Field(default_factory=list)
    model_transports: dict[str, Transport] = Field(default_factory=dict)
    default_model: str = ""
    api_key: SecretStr | None = Field(default=None, repr=False)
    api_key_env: str | None = None
    api_key_required: bool | None = None
    codex_oauth: dict[str, Any] | None = Field(default=None, repr=False)
    aws_profile: str | None = None
    aws_region: str | None = None
    aws_credential_command: str | None = None
    editable: bool = False
    reasoning_effort_options: list[ReasoningEffortOption] = Field(
        default_factory=list, alias="reasoningEffortOptions"
    )
    default_reasoning_budget_tokens: dict[str, int] = Field(
        default_factory=dict, alias="defaultReasoningBudgetTokens"
    )
    default_reasoning_effort: str | None = Field(default=None, alias="defaultReasoningEffort")
    fast_mode_available: bool = Field(default=False, alias="fastModeAvailable")
    context_window_sizes: dict[str, int] = Field(default_factory=dict)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    script: dict[str, list[dict[str, Any]]] | None = None
    script_path: str | None = None
    exhausted: Literal["echo", "fail"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _infer_kind(cls, data: Any) -> Any:
        """A profile without `kind` gets the one its other fields imply."""
        if not isinstance(data, dict) or data.get("kind"):
            return data
        if data.get("script") is not None or data.get("script_path"):
            kind = "scripted"
        elif data.get("transport") == "anthropic_messages":
            kind = "anthropic"
        elif data.get("aws_region") or data.get("aws_profile"):
            kind = "bedrock"
        elif data.get("transport") == "responses":
            kind = "openai"
        else:
            kind = "chat_completions"
        return {**data, "kind": kind}

    @field_serializer("api_key", "codex_oauth")
    def _never_serialize_secrets(self, value: object) -> None:
        """Keys stay in settings.json; a serialized profile never carries them."""
        return None

    def secret_api_key(self) -> str | None:
        """The stored key, or None when the profile has none (or only a masked one)."""
        if self.api_key is None:
            return None
        value = self.api_key.get_secret_value().strip()
        if not value or set(value) == {"*"}:
            return None
        return value


class Webhook(BaseModel):
    """One settings.json webhook: where run notices are posted, for which events, signed how.

    The URL is never shown in a message (it may carry a token); the secret never leaves the
    worker's delivery activity.
    """

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    url: str = Field(repr=False)
    events: list[WebhookEvent] = Field(default_factory=lambda: list(WEBHOOK_EVENTS))
    secret: SecretStr | None = Field(default=None, repr=False)

    @field_serializer("url", "secret")
    def _never_serialize(self, value: object) -> None:
        """URLs and secrets stay in settings.json."""
        return None


def read_webhooks(raw: Any) -> list[Webhook]:
    """settings.json `webhooks`, each entry checked; a bad one is a SettingsError naming it."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SettingsError(
            '\'webhooks\' in settings.json must be a list of {"url", "events", "secret"}; '
            "fix the file"
        )
    return [_read_webhook(i, entry) for i, entry in enumerate(raw)]


def _read_webhook(index: int, entry: Any) -> Webhook:
    where = f"settings.json webhooks[{index}]"
    if not isinstance(entry, dict):
        raise SettingsError(f'{where} must be an object with "url", "events" and "secret"')
    url = entry.get("url")
    if url is None:
        raise SettingsError(f'{where} has no "url"; give the http(s) address to post notices to')
    if not _http_url(url):
        raise SettingsError(
            f'{where} "url" is not an http(s) URL; give one such as https://host/path'
        )
    events = entry.get("events", list(WEBHOOK_EVENTS))
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise SettingsError(
            f'{where} "events" must be a list of event names ({", ".join(WEBHOOK_EVENTS)})'
        )
    unknown = sorted({e for e in events if e not in WEBHOOK_EVENTS})
    if unknown:
        raise SettingsError(
            f"{where} has an unknown event {unknown[0]!r}; give any of {', '.join(WEBHOOK_EVENTS)}"
        )
    secret = entry.get("secret")
    if secret is not None and not isinstance(secret, str):
        raise SettingsError(f'{where} "secret" must be a string')
    return Webhook.model_validate({**entry, "events": list(dict.fromkeys(events))})


def _http_url(value: Any) -> bool:
    """Whether `value` is an absolute http(s) URL with a host (and a numeric port, if any)."""
    if not isinstance(value, str) or any(ch.isspace() or ord(ch) < 32 for ch in value):
        return False
    parsed = urlsplit(value)
    try:
        parsed.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.hostname)


class AppSettings(BaseModel):
    """settings.json: `{"active_provider": id, "providers": {id: profile}, ...}`."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    active_provider: str = "scripted"
    providers: dict[str, ProviderProfile] = Field(default_factory=dict)
    mcp: dict[str, Any] | list[Any] = Field(default_factory=dict)
    api_keys: dict[str, str] = Field(default_factory=dict, repr=False)
    skill_search_paths: list[str] = Field(default_factory=list)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    lsp: dict[str, Any] | None = None
    local_diagnostics: dict[str, Any] | None = None
    search: dict[str, Any] | None = None
    webhooks: list[Webhook] = Field(default_factory=list)

    @field_serializer("api_keys")
    def _never_serialize_tenant_keys(self, value: dict[str, str]) -> dict[str, str]:
        """Tenant bearer keys stay in settings.json."""
        return {}

    def profile(self, provider_id: str) -> ProviderProfile | None:
        """The profile for `provider_id`, or None when settings do not define it."""
        return self.providers.get(provider_id)

    def tenant_for_key(self, bearer_key: str) -> str | None:
        """The tenant a bearer key belongs to, or None for an unknown key."""
        return self.api_keys.get(bearer_key)


def _openai_efforts() -> list[dict[str, Any]]:
    return [
        {"value": v, "label": v.capitalize(), "uses_budget_tokens": False}
        for v in ("none", "low", "medium", "high")
    ]


def _claude_efforts() -> list[dict[str, Any]]:
    return [
        {"value": "none", "label": "None", "uses_budget_tokens": False},
        {"value": "adaptive", "label": "Adaptive", "uses_budget_tokens": False},
        {"value": "low", "label": "Low", "uses_budget_tokens": True},
        {"value": "medium", "label": "Medium", "uses_budget_tokens": True},
        {"value": "high", "label": "High", "uses_budget_tokens": True},
    ]


def _chat(
    name: str, base_url: str, env: str | None, model: str, *, path: str = "v1/chat/completions"
) -> dict[str, Any]:
    return {
        "kind": "chat_completions",
        "display_name": name,
        "base_url": base_url,
        "transport": "chat_completions",
        "chat_completions_path": path,
        "api_key_env": env,
        "api_key_required": env is not None,
        "default_model": model,
        "reasoningEffortOptions": _openai_efforts(),
    }


BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "openai": {
        "kind": "openai",
        "display_name": "OpenAI",
        "base_url": "https://api.openai.com",
        "transport": "responses",
        "api_key_env": "OPENAI_API_KEY",
        "api_key_required": True,
        "default_model": "gpt-4o-mini",
        "reasoningEffortOptions": _openai_efforts(),
        "fastModeAvailable": True,
    },
    "openrouter": _chat(
        "OpenRouter", "https://openrouter.ai/api", "OPENROUTER_API_KEY", "openai/gpt-4o-mini"
    ),
    "groq": _chat("Groq", "https://api.groq.com/openai", "GROQ_API_KEY", "llama-3.3-70b-versatile"),
    "together": _chat(
        "Together AI",
        "https://api.together.xyz",
        "TOGETHER_API_KEY",
        "meta-llama/Llama-3.3-70B-Instruct-Turbo",
    ),
    "fireworks": _chat(
        "Fireworks",
        "https://api.fireworks.ai/inference",
        "FIREWORKS_API_KEY",
        "accounts/fireworks/models/llama-v3p3-70b-instruct",
    ),
    "deepseek": _chat("DeepSeek", "https://api.deepseek.com", "DEEPSEEK_API_KEY", "deepseek-chat"),
    "xai": _chat("xAI", "https://api.x.ai", "XAI_API_KEY", "grok-3-mini"),
    "mistral": _chat(
        "Mistral", "https://api.mistral.ai", "MISTRAL_API_KEY", "mistral-large-latest"
    ),
    "perplexity": _chat(
        "Perplexity",
        "https://api.perplexity.ai",
        "PERPLEXITY_API_KEY",
        "sonar",
        path="chat/completions",
    ),
    "gemini": _chat(
        "Google Gemini",
        "https://generativelanguage.googleapis.com/v1beta/openai",
        "GEMINI_API_KEY",
        "gemini-2.0-flash",
        path="chat/completions",
    ),
    "ollama": _chat("Ollama", "http://localhost:11434/v1", None, "llama3.1"),
    "lmstudio": _chat("LM Studio", "http://localhost:1234/v1", None, "local-model"),
    "custom_openai_compatible": {
        **_chat("Custom OpenAI-compatible", "http://localhost:8000/v1", None, "model-name"),
        "api_key_env": "OPENAI_COMPATIBLE_API_KEY",
        "api_key_required": False,
        "editable": True,
    },
    "anthropic": {
        "kind": "anthropic",
        "display_name": "Anthropic",
        "base_url": "https://api.anthropic.com",
        "transport": "anthropic_messages",
        "api_key_env": "ANTHROPIC_API_KEY",
        "api_key_required": True,
        "default_model": "claude-3-5-sonnet-latest",
        "reasoningEffortOptions": _claude_efforts(),
    },
    "bedrock": {
        "kind": "bedrock",
        "display_name": "Amazon Bedrock",
        "api_key_required": False,
        "default_model": "anthropic.claude-sonnet-4-20250514-v1:0",
        "reasoningEffortOptions": _claude_efforts(),
    },
    "scripted": {
        "kind": "scripted",
        "display_name": "Scripted (tests and demos)",
        "api_key_required": False,
        "default_model": "test-model",
        "exhausted": "echo",
    },
}


def builtin_profiles() -> dict[str, ProviderProfile]:
    """A fresh copy of every built-in profile (spec 10.1 table plus `scripted`)."""
    return {pid: ProviderProfile.model_validate(raw) for pid, raw in BUILTIN_PROFILES.items()}


#: Fields a profile of settings.json owns outright: a built-in profile's value is never layered
#: under them (a user's scripted profile that does not say `exhausted` fails once its turns run
#: out, as the contract says, instead of inheriting the built-in profile's `echo`).
_NOT_INHERITED = frozenset({"exhausted"})


def _merge_profiles(raw_providers: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {pid: dict(raw) for pid, raw in BUILTIN_PROFILES.items()}
    for pid, raw in raw_providers.items():
        if not isinstance(raw, dict):
            raise SettingsError(
                f"provider profile {pid!r} in settings.json must be a JSON object; fix the file"
            )
        base = {k: v for k, v in merged.get(pid, {}).items() if k not in _NOT_INHERITED}
        merged[pid] = {**base, **raw}
    return merged


def parse_settings(raw: Mapping[str, Any]) -> AppSettings:
    """Validate a settings.json document, layering its profiles over the built-in ones."""
    providers = raw.get("providers") or {}
    if not isinstance(providers, dict):
        raise SettingsError("'providers' in settings.json must be an object of profiles by id")
    data = {
        **raw,
        "providers": _merge_profiles(providers),
        "webhooks": read_webhooks(raw.get("webhooks")),
    }
    try:
        return AppSettings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise SettingsError(f"settings.json is invalid ({problems}); fix those fields") from None


def load_settings(home: Path) -> AppSettings:
    """Read `$OPENFLOW_HOME/settings.json`; a missing file gives the built-in defaults."""
    path = Path(home) / SETTINGS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return parse_settings({})
    except OSError as exc:
        raise SettingsError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    try:
        check_json_text(text, str(path))
    except LimitExceeded as exc:
        raise SettingsError(f"{exc}") from None
    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{str(path)!r} is not valid JSON (line {exc.lineno}, column {exc.colno}); fix it"
        ) from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{str(path)!r} must hold a JSON object")
    return parse_settings(raw)


def check_webhooks(home: Path) -> None:
    """Refuse a bad `webhooks` entry in settings.json, for a worker or the API at start.

    Only the webhooks are checked here: a file that cannot be read or parsed at all is
    reported, as before, when a run starts.
    """
    try:
        raw = json.loads((Path(home) / SETTINGS_FILE).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return
    if isinstance(raw, dict):
        read_webhooks(raw.get("webhooks"))


MAX_TOOL_BUDGET = 1024
#: Worker sizing (README, "Sizing a worker"): model calls in flight, tool batches at once,
#: runs kept in the workflow cache, the sticky queue's schedule-to-start timeout, and the
#: workflow-task polls kept open (Temporal's SDK needs at least 2 with a workflow cache).
DEFAULT_MODEL_POOL = 500
DEFAULT_TOOL_POOL = 16
DEFAULT_WORKFLOW_CACHE = 5000
DEFAULT_STICKY_TIMEOUT_S = 3.0
MAX_POOL = 100_000
MAX_STICKY_TIMEOUT_S = 600.0
DEFAULT_WORKFLOW_POLLERS = 5
MAX_WORKFLOW_POLLERS = 100
MAX_TASK_QUEUE_CHARS = 1000
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class RuntimeSettings(BaseSettings):
    """Process settings from `OPENFLOW_*` environment variables (CONTRACT sections 2 and 8).

    Every `OPENFLOW_*` variable the package reads is a field here, and read through
    `runtime_settings()`, which turns a bad one into a SettingsError of one line naming the
    variable and what to give instead. An empty variable is an unset one. The Temporal
    connection (`OPENFLOW_TEMPORAL_ADDRESS`, `OPENFLOW_NAMESPACE`) is read as it is; Temporal's
    own `TEMPORAL_*` variables belong to `openflow.connect`.
    """

    model_config = SettingsConfigDict(env_prefix="OPENFLOW_", extra="ignore", env_ignore_empty=True)

    home: Path = Field(default_factory=lambda: Path.home() / ".openflow")
    temporal_address: str | None = None
    namespace: str = "default"
    task_queue: str = "openflow"
    ui_url: str | None = None
    #: The HTTP API as people reach it: webhook notices link to run pages under it.
    api_url: str | None = None
    script: Path | None = None
    #: The cluster database (`postgresql://...`); unset, run state stays under `home`.
    database_url: SecretStr | None = Field(default=None, repr=False)
    #: Each run's workspace at `<workspaces>/<run_id>` (a volume every worker mounts).
    workspaces: str | None = None
    #: Tenant API keys: `key=tenant` pairs separated by commas, or `@PATH` of a file of them.
    api_keys: SecretStr | None = Field(default=None, repr=False)
    #: Whether prompt and completion text may go into trace spans (1, true, yes or on).
    trace_content: bool = False
    #: Any value: the CLI shows a traceback for an unexpected error instead of one line.
    debug: str | None = None
    #: Confinement of tool processes (bash, ast-grep): `auto` uses bubblewrap when it works,
    #: `required` refuses to start them without it, `off` never confines them.
    tool_sandbox: Literal["auto", "required", "off"] = "auto"
    #: Whether confined tool processes may use the network (`off` gives them only a loopback).
    tool_network: Literal["on", "off"] = "on"
    #: Extra paths hidden from confined tool processes (os.pathsep-separated); unset hides the
    #: usual credential folders of the worker's user (~/.aws, ~/.ssh, ...).
    tool_sandbox_hide: str | None = None
    tool_budget: int = 16
    workflow_sandbox: bool = False
    #: Whether workflow activations run on the worker's event loop, one a turn
    #: (`openflow.workflows.inline`), instead of the SDK's pool of threads.
    workflow_inline: bool = False
    model_pool: int = DEFAULT_MODEL_POOL
    tool_pool: int = DEFAULT_TOOL_POOL
    workflow_cache: int = DEFAULT_WORKFLOW_CACHE
    sticky_timeout: float = DEFAULT_STICKY_TIMEOUT_S
    workflow_pollers: int = DEFAULT_WORKFLOW_POLLERS

    @field_validator("home", mode="before")
    @classmethod
    def _home(cls, value: Any) -> Any:
        text = str(value)
        if "\x00" in text:
            raise ValueError("contains a NUL character — give a folder path")
        if not text.strip():
            return Path.home() / ".openflow"
        path = Path(text.strip()).expanduser()
        if path.exists() and not path.is_dir():
            raise ValueError("is a file, not a folder — give a folder (created when missing)")
        return path

    @field_validator("task_queue", mode="before")
    @classmethod
    def _task_queue(cls, value: Any) -> Any:
        text = str(value)
        if not text.strip() or text != text.strip():
            raise ValueError("has blanks around it or is blank — give a name such as 'openflow'")
        if len(text) > MAX_TASK_QUEUE_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
            raise ValueError(
                f"is not a task queue name — give at most {MAX_TASK_QUEUE_CHARS} printable "
                "characters"
            )
        return text

    @field_validator("ui_url", "api_url", mode="before")
    @classmethod
    def _ui_url(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or not str(value).strip():
            return None
        text = str(value).strip()
        parsed = urlsplit(text)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            example = (
                "the API's address, e.g. https://openflow.example.com"
                if info.field_name == "api_url"
                else "the Web UI's address, e.g. http://host:8233"
            )
            raise ValueError(f"is not an http(s) URL — give {example}")
        try:
            parsed.port  # noqa: B018 - raises for a port that is not a number
        except ValueError:
            raise ValueError("has a port that is not a number — fix the URL") from None
        return text

    @field_validator("script", mode="before")
    @classmethod
    def _script(cls, value: Any) -> Any:
        if value is None:
            return None
        path = Path(str(value)).expanduser()
        if not path.is_file():
            raise ValueError("is not a file — give the path of a script JSON file")
        return path

    @field_validator("tool_budget", mode="before")
    @classmethod
    def _tool_budget(cls, value: Any) -> Any:
        return parse_tool_budget(str(value))

    @field_validator("workflow_sandbox", "workflow_inline", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        return bool(str(value).strip()) and parse_switch(str(value))

    @field_validator("trace_content", mode="before")
    @classmethod
    def _trace_content(cls, value: Any) -> Any:
        return str(value).strip().lower() in _TRUE

    @field_validator("database_url", "workspaces", "api_keys", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if value is None or not str(value).strip() else str(value).strip()

    @field_validator("model_pool", "tool_pool", "workflow_cache", mode="before")
    @classmethod
    def _pool(cls, value: Any) -> Any:
        return parse_pool(str(value))

    @field_validator("sticky_timeout", mode="before")
    @classmethod
    def _sticky_timeout(cls, value: Any) -> Any:
        return parse_seconds(str(value))

    @field_validator("workflow_pollers", mode="before")
    @classmethod
    def _workflow_pollers(cls, value: Any) -> Any:
        return parse_pollers(str(value))


def parse_tool_budget(text: str) -> int:
    """OPENFLOW_TOOL_BUDGET: a whole number of tool calls from 1 to 1024."""
    value = text.strip()
    if not value.isdigit() or not 1 <= int(value) <= MAX_TOOL_BUDGET:
        raise ValueError(f"is not a whole number from 1 to {MAX_TOOL_BUDGET} — give one, e.g. 16")
    return int(value)


def parse_pool(text: str) -> int:
    """A worker pool or cache size: a whole number from 1 to 100,000."""
    value = text.strip()
    if not value.isdigit() or not 1 <= int(value) <= MAX_POOL:
        raise ValueError(f"is not a whole number from 1 to {MAX_POOL} — give one, e.g. 16")
    return int(value)


def parse_pollers(text: str) -> int:
    """The workflow-task polls a worker keeps open: a whole number from 2 to 100."""
    value = text.strip()
    if not value.isdigit() or not 2 <= int(value) <= MAX_WORKFLOW_POLLERS:
        raise ValueError(
            f"is not a whole number from 2 to {MAX_WORKFLOW_POLLERS} — give one, e.g. 10"
        )
    return int(value)


def parse_seconds(text: str) -> float:
    """A timeout in seconds: a number above 0 and at most 600."""
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_STICKY_TIMEOUT_S:  # also refuses nan
        raise ValueError(
            f"is not a number of seconds above 0 and at most {MAX_STICKY_TIMEOUT_S:g} — "
            "give one, e.g. 3"
        )
    return value


def parse_switch(text: str) -> bool:
    """An on/off variable: 1, true, yes, on or 0, false, no, off (any case)."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("is neither on nor off — give 1 or 0 (or true/false, yes/no, on/off)")


def runtime_settings(
    env: Mapping[str, str] | None = None, *, only: Iterable[str] | None = None
) -> RuntimeSettings:
    """The `OPENFLOW_*` variables of `env` (the process environment by default), each checked.

    `only` names the fields to read (the others keep their defaults), so a part of the package
    that needs one variable is not stopped by a bad one it never uses; the CLI checks them all
    before any command runs. Raises SettingsError naming the first bad variable, its value
    (unless it may carry a secret) and what to give instead. The settings answered are shared
    between the callers that read the same variables: read them, do not change them.
    """
    fields = tuple(RuntimeSettings.model_fields if only is None else only)
    source = os.environ if env is None else env
    given = (
        None
        if env is None and only is None
        else tuple((name, source.get(_PREFIX + name.upper(), "")) for name in fields)
    )
    # The same variables read the same: an activity that asks on every call (a model turn's
    # span asks whether it may carry text) is not charged a settings model each time.
    # (Unset fields read the process environment, and the default home reads HOME.)
    process = sorted(
        kv for kv in os.environ.items() if kv[0] == "HOME" or kv[0].upper().startswith(_PREFIX)
    )
    key = (given, tuple(process))
    read = _read.get(key)
    if read is None:
        read = _read_settings(env, given)
        if len(_read) >= _READ_LIMIT:
            _read.clear()
        _read[key] = read
    return read


def _read_settings(
    env: Mapping[str, str] | None, given: tuple[tuple[str, str], ...] | None
) -> RuntimeSettings:
    try:
        if given is None:
            return RuntimeSettings()
        return RuntimeSettings.model_validate({k: v for k, v in given if v})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        variable = _PREFIX + field.upper()
        value = (os.environ if env is None else env).get(variable, "")
        shown = "" if field in _NOT_SHOWN else f"={value!r}"
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"{variable}{shown}: {reason}") from None


_PREFIX = "OPENFLOW_"
#: The settings read so far, by what they were read from (at most this many kept).
_read: dict[Any, RuntimeSettings] = {}
_READ_LIMIT = 64
_NOT_SHOWN = frozenset({"ui_url", "api_url", "database_url", "api_keys"})


__all__ = [
    "BUILTIN_PROFILES",
    "SETTINGS_FILE",
    "AppSettings",
    "ModelPrice",
    "ProviderKind",
    "ProviderProfile",
    "ReasoningEffortOption",
    "RuntimeSettings",
    "SettingsError",
    "Webhook",
    "parse_pollers",
    "parse_pool",
    "parse_seconds",
    "parse_switch",
    "parse_tool_budget",
    "runtime_settings",
    "Transport",
    "builtin_profiles",
    "check_webhooks",
    "load_settings",
    "openflow_home",
    "parse_settings",
    "read_webhooks",
]
