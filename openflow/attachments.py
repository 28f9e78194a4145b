"""Files people give a run: checked, kept in the run store by content, referenced in history.

An attachment comes with the entrypoint (`openflow run --attach`, multipart `POST /runs`),
with an input answer (`openflow runs input --attach`, multipart `POST /runs/{id}/input`) or
with a live message (`openflow runs message --attach`, multipart `POST /runs/{id}/messages`). Its
bytes go to the run store under `attachments/<sha256>` before the run hears of it; Temporal
history carries only an `Attachment` reference (id, name, media type, size, sha256, and the
`run://attachments/<sha256>` URI). The model-turn activity reads the bytes back just before a
provider sees them (`resolve_turn`): a text file becomes text, an image or a PDF a base64
`data:` URI that each wire sends in its own block.

What can be attached is told by the bytes, not the name: PNG, JPEG, GIF and WebP images, PDF
documents, and UTF-8 text. Each file is at most `max_attachment_bytes`, and one entrypoint or
answer carries at most `max_attachments` of them.

Errors::

    AttachmentError     a path that is not a readable file, or bytes of a type not supported
    LimitExceeded       (openflow.engine.errors) a file over max_attachment_bytes, or too many
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from openflow.activities.store import KeyNotFound, RunStore
from openflow.engine.limits import MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS
from openflow.engine.request import AgentRequest
from openflow.engine.transcript import Attachment, TranscriptItem, UserItem

__all__ = [
    "KEY_PREFIX",
    "AttachmentError",
    "Upload",
    "check_count",
    "read_upload",
    "reference",
    "resolve",
    "resolve_turn",
    "store_uploads",
]

KEY_PREFIX = "attachments/"
URI_PREFIX = "run://attachments/"
SUPPORTED = "a PNG, JPEG, GIF or WebP image, a PDF, or a UTF-8 text file"
_DIGEST = re.compile(r"[0-9a-f]{64}")
_TEXT_APPLICATION = ("json", "xml", "yaml", "toml", "javascript", "x-sh", "sql", "csv")


class AttachmentError(ValueError):
    """A file that cannot be attached; the message names it and says what to give instead."""


@dataclass(frozen=True)
class Upload:
    """One file as a person gave it: its name (no folders) and its bytes."""

    name: str
    data: bytes


def _clean_name(name: str) -> str:
    base = PurePath(name.replace("\\", "/")).name
    base = "".join(ch for ch in base if ch.isprintable()).strip()
    return base[:255] or "attachment"


def sniff(name: str, data: bytes) -> str:
    """The media type of `data` (by its first bytes; text by decoding); AttachmentError if none."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachmentError(
            f"attachment {name!r} is not {SUPPORTED}; attach one of those"
        ) from None
    if b"\x00" in data:
        raise AttachmentError(f"attachment {name!r} is not {SUPPORTED}; attach one of those")
    guessed, _ = mimetypes.guess_type(name)
    if guessed and (
        guessed.startswith("text/")
        or (guessed.startswith("application/") and guessed.endswith(_TEXT_APPLICATION))
    ):
        return guessed
    return "text/plain"


def is_text(media_type: str) -> bool:
    """Whether an attachment of this type is sent as text (not as an image or a document)."""
    return not (media_type.startswith("image/") or media_type == "application/pdf")


def reference(upload: Upload) -> Attachment:
    """The reference history carries for `upload` (checked: size and type)."""
    name = _clean_name(upload.name)
    size = len(upload.data)
    if size > MAX_ATTACHMENT_BYTES.value:
        raise MAX_ATTACHMENT_BYTES.error(
            f"attachment {name!r}", size, "attach a smaller file (or a smaller image)"
        )
    media_type = sniff(name, upload.data)
    digest = hashlib.sha256(upload.data).hexdigest()
    return Attachment(
        id=f"att-{digest[:16]}",
        name=name,
        media_type=media_type,
        uri=URI_PREFIX + digest,
        size_bytes=size,
        sha256=digest,
    )


def check_count(count: int) -> None:
    """Raise LimitExceeded when one entrypoint or answer carries too many files."""
    if count > MAX_ATTACHMENTS.value:
        raise MAX_ATTACHMENTS.error("the attachments", count, "attach fewer files")


def read_upload(path: Path) -> Upload:
    """A file from disk (for `--attach`), refused in one line when it cannot be attached."""
    shown = str(path)
    try:
        if not path.exists():
            raise AttachmentError(f"--attach {shown}: no such file — check the path")
        if path.is_dir():
            raise AttachmentError(f"--attach {shown}: is a folder — attach a file")
        if not path.is_file():
            raise AttachmentError(f"--attach {shown}: not a regular file — attach a file")
        size = path.stat().st_size
        if size > MAX_ATTACHMENT_BYTES.value:
            raise MAX_ATTACHMENT_BYTES.error(
                f"--attach {shown}", size, "attach a smaller file (or a smaller image)"
            )
        with path.open("rb") as handle:
            data = handle.read(MAX_ATTACHMENT_BYTES.value + 1)
    except OSError as exc:
        raise AttachmentError(f"--attach {shown}: cannot read it: {exc.strerror or exc}") from None
    return Upload(path.name, data)


def prepare(uploads: Sequence[Upload]) -> list[tuple[Attachment, bytes]]:
    """Each upload checked, with the reference history will carry; nothing is stored yet."""
    check_count(len(uploads))
    return [(reference(upload), upload.data) for upload in uploads]


def store_uploads(
    store: RunStore, run_id: str, prepared: Sequence[tuple[Attachment, bytes]]
) -> list[Attachment]:
    """Put each file's bytes in the run store under its digest; return the references."""
    for ref, data in prepared:
        key = KEY_PREFIX + str(ref.sha256)
        if not store.exists(run_id, key):
            store.put_bytes(run_id, key, data)
    return [ref for ref, _ in prepared]


def resolve(store: RunStore, run_id: str, attachments: Sequence[Attachment]) -> tuple[Any, ...]:
    """The attachments with their content: text for text files, a `data:` URI for the rest.

    One whose bytes are not in the store, or that does not name them by a sha256 digest
    (an `act` update can carry anything), stays a reference: the model is told its name.
    """
    out: list[Attachment] = []
    for att in attachments:
        digest = att.sha256 or ""
        if att.text is not None or not _DIGEST.fullmatch(digest) or att.uri != URI_PREFIX + digest:
            out.append(att)
            continue
        try:
            data = store.get_bytes(run_id, KEY_PREFIX + digest)
        except KeyNotFound:
            out.append(att)
            continue
        if is_text(att.media_type):
            update: dict[str, Any] = {"text": data.decode("utf-8", errors="replace")}
        else:
            encoded = base64.b64encode(data).decode("ascii")
            update = {"uri": f"data:{att.media_type};base64,{encoded}"}
        out.append(att.model_copy(update=update))
    return tuple(out)


def resolve_turn(
    store: RunStore,
    run_id: str,
    request: AgentRequest,
    transcript: list[TranscriptItem],
) -> tuple[AgentRequest, list[TranscriptItem]]:
    """The request and transcript of one model turn with every attachment's content read in."""
    if request.entrypoint_attachments:
        request = request.model_copy(
            update={
                "entrypoint_attachments": resolve(store, run_id, request.entrypoint_attachments)
            }
        )
    if any(isinstance(item, UserItem) and item.attachments for item in transcript):
        transcript = [
            item.model_copy(update={"attachments": resolve(store, run_id, item.attachments)})
            if isinstance(item, UserItem) and item.attachments
            else item
            for item in transcript
        ]
    return request, transcript
