"""MCP tool names (spec 4.8) and the server entries settings.json may hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openflow.activities.mcp import (
    McpConfigError,
    decode_segment,
    encode_segment,
    parse_servers,
    parse_tool_name,
    tool_name,
)


@pytest.mark.parametrize(
    ("server", "tool", "name"),
    [
        ("gh", "search", "mcp_2_gh_search"),
        ("my-server", "get_issue", "mcp_9_my-server_get__issue"),
        ("a b", "x.y", "mcp_6_a_x20b_x_x2Ey"),
        ("café", "run", "mcp_11_caf_xC3_xA9_run"),
        ("s_1", "t", "mcp_4_s__1_t"),
    ],
)
def test_names_follow_the_spec_encoding(server: str, tool: str, name: str) -> None:
    assert tool_name(server, tool) == name
    assert parse_tool_name(name) == (server, tool)


def test_the_legacy_slash_form_is_parsed() -> None:
    assert parse_tool_name("mcp/gh/search") == ("gh", "search")
    assert parse_tool_name("mcp/gh/a/b") == ("gh", "a/b")


@pytest.mark.parametrize(
    "name",
    [
        "mcp_0__search",
        "mcp_2_gh_",
        "mcp_3_gh_search",
        "mcp_2_ghsearch",
        "mcp_2_g!_search",
        "mcp_2_gh_se_arch",
        "mcp_2_gh_x_x4",
        "mcp_2_gh_a_x41",
        "mcp_02_gh_search",
        "mcp//search",
        "mcp/gh/",
        "search",
    ],
)
def test_malformed_names_are_not_mcp_names(name: str) -> None:
    assert parse_tool_name(name) is None


def test_empty_segments_cannot_be_named() -> None:
    with pytest.raises(ValueError):
        tool_name("", "search")
    with pytest.raises(ValueError):
        tool_name("gh", "")


@given(st.text(min_size=1), st.text(min_size=1))
def test_every_server_and_tool_pair_round_trips(server: str, tool: str) -> None:
    name = tool_name(server, tool)
    assert all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in name)
    assert parse_tool_name(name) == (server, tool)


@given(st.text())
def test_segment_decoding_inverts_encoding(segment: str) -> None:
    assert decode_segment(encode_segment(segment)) == segment


def test_the_documented_shape_is_read() -> None:
    parsed = parse_servers(
        {
            "servers": {
                "fs": {"transport": "stdio", "command": "mcp-fs", "args": ["--root", "."]},
                "web": {
                    "transport": "http",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"A": "b"},
                },
            }
        }
    )
    assert list(parsed.servers) == ["fs", "web"]
    assert parsed.servers["fs"].args == ["--root", "."]
    assert parsed.servers["web"].headers == {"A": "b"}
    assert parsed.servers["fs"].tier == "write"
    assert parsed.servers["fs"].concurrency == "exclusive"
    assert parsed.problems == {}


def test_other_hosts_shapes_are_read() -> None:
    listed = parse_servers(
        [{"id": "fs", "command": "mcp-fs"}, {"id": "web", "type": "streamable-http", "url": "u"}]
    )
    assert {k: v.transport for k, v in listed.servers.items()} == {"fs": "stdio", "web": "http"}
    claude = parse_servers({"mcpServers": {"fs": {"command": "mcp-fs"}, "web": {"url": "u"}}})
    assert {k: v.transport for k, v in claude.servers.items()} == {"fs": "stdio", "web": "http"}


def test_a_server_policy_can_mark_its_tools_read_and_shared() -> None:
    parsed = parse_servers(
        {
            "servers": {
                "a": {"command": "x", "policy": {"tier": "read", "concurrency": "shared"}},
                "b": {"command": "x", "tier": "read"},
            }
        }
    )
    assert (parsed.servers["a"].tier, parsed.servers["a"].concurrency) == ("read", "shared")
    assert (parsed.servers["b"].tier, parsed.servers["b"].concurrency) == ("read", "exclusive")


def test_disabled_servers_are_left_out_and_bad_entries_reported() -> None:
    parsed = parse_servers(
        {
            "servers": {
                "off": {"command": "x", "disabled": True},
                "nocmd": {"transport": "stdio"},
                "nourl": {"transport": "http"},
                "odd": {"transport": "carrier-pigeon", "command": "x"},
                "text": "not an object",
            }
        }
    )
    assert parsed.servers == {}
    assert set(parsed.problems) == {"nocmd", "nourl", "odd", "text"}
    assert "needs a `command`" in parsed.problems["nocmd"]
    assert "needs a `url`" in parsed.problems["nourl"]


def test_an_unreadable_mcp_section_is_an_error() -> None:
    assert parse_servers({}).servers == {}
    with pytest.raises(McpConfigError, match="servers"):
        parse_servers("servers")
    with pytest.raises(McpConfigError, match="mcp.servers"):
        parse_servers({"servers": 3})


def test_a_relative_cwd_is_inside_the_execution_folder(tmp_path: Path) -> None:
    parsed = parse_servers(
        {"servers": {"a": {"command": "x", "cwd": "sub"}, "b": {"command": "x"}}}
    )
    assert parsed.servers["a"].working_dir(tmp_path) == tmp_path / "sub"
    assert parsed.servers["b"].working_dir(tmp_path) == tmp_path
