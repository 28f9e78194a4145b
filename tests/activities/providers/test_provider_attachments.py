"""Attachments on every wire: stored by reference, read back from the run store, sent natively.

Each test stores files the way the CLI and API do (`attachments.prepare` + `store_uploads`),
resolves the turn the way the model-turn activity does (`resolve_turn`), sends it through the
real SDK to the local server speaking that wire, and checks the body that went over it.
"""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import WireKit
from wire.server import WireServer
from wire.turns import FakeCall, FakeTurn

from openflow.activities.providers import ProviderRegistry
from openflow.activities.store import FileRunStore
from openflow.attachments import Upload, prepare, resolve_turn, store_uploads
from openflow.engine.harness import SUBMIT_TOOL
from openflow.engine.request import AgentRequest
from openflow.engine.transcript import AssistantItem, TranscriptItem, UserItem

RUN = "run-attach"


def tiny_png() -> bytes:
    """A real 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG = tiny_png()
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
NOTES = "line one\nline two\n"


def _request(kit: WireKit, refs: list[Any]) -> AgentRequest:
    return AgentRequest(
        workflow_id="wf-attach",
        node_id="look",
        node_label="Look",
        model=kit.model,
        provider_id=kit.profile_id,
        system_messages=("You look at pictures.",),
        task_prompt="Describe the chart.",
        input={"entrypoint": {"text": "see attached"}, "upstream": []},
        entrypoint_attachments=tuple(refs),
    )


def _user_messages(kit: WireKit, body: dict[str, Any]) -> list[Any]:
    return [m for m in kit.messages(body) if isinstance(m, dict) and m.get("role") == "user"]


def _images(kit: WireKit, content: Any) -> list[str]:
    """The base64 image data of one user message's content, wire by wire."""
    if not isinstance(content, list):
        return []
    found = []
    for part in content:
        if kit.name == "anthropic_messages" and part.get("type") == "image":
            assert part["source"]["media_type"] == "image/png"
            found.append(part["source"]["data"])
        elif kit.name == "chat_completions" and part.get("type") == "image_url":
            found.append(part["image_url"]["url"].split(",", 1)[1])
        elif kit.name == "responses" and part.get("type") == "input_image":
            found.append(part["image_url"].split(",", 1)[1])
        elif kit.name == "bedrock_converse" and "image" in part:
            assert part["image"]["format"] == "png"
            found.append(part["image"]["source"]["bytes"])
    return found


def _documents(kit: WireKit, content: Any) -> list[Any]:
    if not isinstance(content, list):
        return []
    kinds = {
        "anthropic_messages": lambda p: p.get("type") == "document",
        "chat_completions": lambda p: p.get("type") == "file",
        "responses": lambda p: p.get("type") == "input_file",
        "bedrock_converse": lambda p: "document" in p,
    }
    return [part for part in content if kinds[kit.name](part)]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))


async def test_images_pdfs_and_text_files_reach_each_wire_in_its_native_form(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry, tmp_path: Path
) -> None:
    store = FileRunStore(tmp_path / "runs")
    [image] = store_uploads(store, RUN, prepare([Upload("chart.png", PNG)]))
    answer = store_uploads(
        store, RUN, prepare([Upload("notes.txt", NOTES.encode()), Upload("spec.pdf", PDF)])
    )
    # What history carries: a reference, no bytes.
    assert image.uri == f"run://attachments/{image.sha256}"
    assert image.text is None and image.size_bytes == len(PNG)
    transcript: list[TranscriptItem] = [
        AssistantItem(content="Which notes?"),
        UserItem(content="These.", attachments=tuple(answer)),
    ]
    request, resolved = resolve_turn(store, RUN, _request(kit, [image]), transcript)

    submit = '{"output": {"summary": "a green dot"}, "assistant_message": "Seen."}'
    wire_server.plan(
        kit.encoder.encode(FakeTurn(calls=[FakeCall("call_1", SUBMIT_TOOL, submit)]), kit.model)
    )
    provider = registry.resolve(kit.profile_id, kit.make_profile(wire_server.base_url))
    reply = await provider.complete(request, resolved, [], lambda kind, text: None)
    assert reply.tool_calls[0].name == SUBMIT_TOOL

    body = wire_server.requests[-1].json()
    first, answered = _user_messages(kit, body)[0], _user_messages(kit, body)[-1]
    encoded = base64.b64encode(PNG).decode()
    assert _images(kit, first["content"]) == [encoded]
    assert "Describe the chart." in _text_of(first["content"])
    # The answer's text file went as text, its PDF as the wire's document part.
    assert "These." in _text_of(answered["content"])
    assert "Attachment notes.txt (text/plain):\nline one\nline two" in _text_of(answered["content"])
    assert len(_documents(kit, answered["content"])) == 1
    assert _images(kit, answered["content"]) == []


@pytest.mark.parametrize("kit", ["anthropic_messages"], indirect=True)
async def test_an_attachment_missing_from_the_store_is_named_not_fatal(
    kit: WireKit, wire_server: WireServer, registry: ProviderRegistry, tmp_path: Path
) -> None:
    [ref] = [ref for ref, _ in prepare([Upload("lost.png", PNG)])]  # never stored
    store = FileRunStore(tmp_path / "runs")
    request, _ = resolve_turn(store, RUN, _request(kit, [ref]), [])
    wire_server.plan(kit.encoder.encode(FakeTurn(text=["ok"]), kit.model))
    provider = registry.resolve(kit.profile_id, kit.make_profile(wire_server.base_url))
    await provider.complete(request, [], [], lambda kind, text: None)
    first = _user_messages(kit, wire_server.requests[-1].json())[0]
    assert "Attachment lost.png (image/png)" in _text_of(first["content"])
    assert _images(kit, first["content"]) == []
