"""MCP servers as settings.json configures them, under `mcp`.

The canonical shape is `{"servers": {id: server}}` where a server is
`{"transport": "stdio", "command", "args", "env", "cwd"}` or
`{"transport": "http", "url", "headers"}`. Also accepted: a list of servers with an `id`,
the `mcpServers` map other MCP hosts use, `type` for `transport`, a transport inferred from
`command` or `url`, and `disabled`/`enabled`. A server may mark its tools `read` tier or `shared`
concurrency (`tier`, `concurrency`, or both inside `policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from openflow.activities.mcp.errors import McpConfigError

_TRANSPORTS = {
    "stdio": "stdio",
    "http": "http",
    "streamable_http": "http",
    "streamable-http": "http",
    "streamablehttp": "http",
}


class McpServerConfig(BaseModel):
    """One configured MCP server: how to reach it and how its tools may run."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)

    transport: Literal["stdio", "http"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    tier: Literal["read", "write"] = "write"
    concurrency: Literal["shared", "exclusive"] = "exclusive"
    enabled: bool = True

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, data: Any) -> Any:
        """Accept the aliases other MCP hosts write and infer a missing transport."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        kind = out.pop("type", None)
        kind = out.get("transport") or kind
        if kind is None:
            kind = "http" if out.get("url") and not out.get("command") else "stdio"
        if isinstance(kind, str):
            kind = _TRANSPORTS.get(kind.strip().lower(), kind)
        out["transport"] = kind
        policy = out.pop("policy", None)
        if isinstance(policy, dict):
            for key in ("tier", "concurrency"):
                if key in policy and key not in out:
                    out[key] = policy[key]
        if "disabled" in out:
            out["enabled"] = not bool(out.pop("disabled"))
        return out

    @model_validator(mode="after")
    def _endpoint(self) -> McpServerConfig:
        """A stdio server needs a command, an HTTP server a URL."""
        if self.transport == "stdio" and not (self.command or "").strip():
            raise ValueError("a stdio server needs a `command`")
        if self.transport == "http" and not (self.url or "").strip():
            raise ValueError("an http server needs a `url`")
        return self

    def working_dir(self, execution_dir: Path) -> Path:
        """A stdio server's folder: `cwd` (relative to the execution folder), else that folder."""
        if not self.cwd:
            return execution_dir
        return execution_dir / Path(self.cwd).expanduser()


@dataclass(frozen=True)
class McpServers:
    """The configured servers by id, and the entries that could not be read."""

    servers: dict[str, McpServerConfig]
    problems: dict[str, str]


def _entries(raw: Any) -> list[tuple[str, Any]]:
    """(id, server) pairs from any of the accepted shapes of `settings.mcp`."""
    if raw is None:
        return []
    if isinstance(raw, list):
        return [_listed(i, item) for i, item in enumerate(raw)]
    if not isinstance(raw, Mapping):
        raise McpConfigError('"mcp" in settings.json must be an object with "servers"; fix it')
    for key in ("servers", "mcpServers", "mcp_servers"):
        if key in raw:
            servers = raw[key]
            if isinstance(servers, list):
                return [_listed(i, item) for i, item in enumerate(servers)]
            if not isinstance(servers, Mapping):
                raise McpConfigError(
                    f'"mcp.{key}" in settings.json must map server ids to servers; fix it'
                )
            return [(str(k), v) for k, v in servers.items()]
    return [(str(k), v) for k, v in raw.items() if isinstance(v, Mapping)]


def _listed(index: int, item: Any) -> tuple[str, Any]:
    if isinstance(item, Mapping):
        ident = item.get("id") or item.get("server_id") or item.get("serverId") or item.get("name")
        if isinstance(ident, str) and ident:
            rest = {
                k: v for k, v in item.items() if k not in ("id", "server_id", "serverId", "name")
            }
            return ident, rest
    return f"#{index}", item


def _problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def parse_servers(raw: Any) -> McpServers:
    """The enabled servers of `settings.mcp`; entries that do not validate become problems."""
    servers: dict[str, McpServerConfig] = {}
    problems: dict[str, str] = {}
    for server_id, data in _entries(raw):
        if not server_id.strip() or server_id.startswith("#"):
            problems[server_id] = "a server needs a non-empty id"
            continue
        if not isinstance(data, Mapping):
            problems[server_id] = "a server must be a JSON object"
            continue
        try:
            config = McpServerConfig.model_validate(dict(data))
        except ValidationError as exc:
            problems[server_id] = _problem(exc)
            continue
        if config.enabled:
            servers[server_id] = config
    return McpServers(
        servers=dict(sorted(servers.items())), problems=dict(sorted(problems.items()))
    )


__all__ = ["McpServerConfig", "McpServers", "parse_servers"]
