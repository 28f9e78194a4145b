"""The `model_turn` activity: one call of a model, with the transcript kept in the run store.

The turn appends what it sends to the conversation's transcript, calls the provider, runs the
reply's calls at once when all are reads the node lets through unasked, and appends the reply
(then those results) before it returns. A post-run review (`purpose="review"`) reads each
node's whole conversation from the store into its evidence.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from typing import Any, Literal

from temporalio import activity

from openflow import contracts as c
from openflow.activities import tools_runner
from openflow.activities.heartbeat import heartbeating
from openflow.activities.lru import Lru
from openflow.activities.mcp_context import expand_request
from openflow.activities.model_providers import ModelProviders
from openflow.activities.providers.errors import ProviderError
from openflow.activities.run_files import CATALOG_KEY, RunFiles
from openflow.activities.spans import elapsed_ms, model_span, record_failure, record_reply
from openflow.activities.store import KeyNotFound
from openflow.activities.tools_runner import BatchDeps, tool_specs
from openflow.activities.transcripts import Transcripts, Unwritten
from openflow.activities.write_handoff import store_handoff
from openflow.attachments import resolve_turn
from openflow.engine.advance import reply_items
from openflow.engine.classify import Completed, classify_reply
from openflow.engine.handoff import HandoffFile, handoff_file
from openflow.engine.headers import HeaderRefs, from_set, restore
from openflow.engine.policy import EAGER_TOOLS
from openflow.engine.recipes import RECIPE_MARK, InputRecipe, recipe_keys, resolve
from openflow.engine.request import AgentRequest, ModelReply, ProviderFailure, ToolSpec
from openflow.engine.review import REVIEW_NODE, render_evidence
from openflow.engine.transcript import TranscriptItem
from openflow.live import LiveChannel

log = logging.getLogger(__name__)

Prepared = tuple[AgentRequest, list[TranscriptItem], list[ToolSpec], int]


def turn_purpose(inp: c.ModelTurnInput) -> Literal["node", "review"]:
    """What the call is for. A call recorded before `purpose` existed is the review when its
    node is the review's."""
    if "purpose" in inp.model_fields_set:
        return inp.purpose
    return "review" if (inp.node_id or c.call_node(inp.call_id)) == REVIEW_NODE else "node"


class LiveDeltas:
    """The reply's text and thinking as they stream, published to the live channel (never to
    history), each role's stream finalized when the call ends."""

    def __init__(self, live: LiveChannel | None, run_id: str, node_id: str, call_id: str) -> None:
        self.live = live
        self.run_id = run_id
        self.node_id = node_id
        self.message_id = call_id
        self.streamed: set[str] = set()

    def on_delta(self, kind: str, text: str) -> None:
        if self.live is None or not text:
            return
        role = "thinking" if kind == "thinking" else "assistant"
        self.streamed.add(role)
        self._publish(role, text, finalize=False)

    def finalize(self) -> None:
        for role in sorted(self.streamed):
            self._publish(role, "", finalize=True)

    def _publish(self, role: str, delta: str, *, finalize: bool) -> None:
        assert self.live is not None
        self.live.publish(
            self.run_id,
            {
                "type": "ChatMessageDelta",
                "node_id": self.node_id,
                "message_id": self.message_id,
                "role": role,
                "delta": delta,
                "finalize": finalize,
            },
        )


def compact_reply(reply: ModelReply) -> ModelReply:
    """A reply without what history need not carry twice (raw arguments that parsed)."""
    calls = tuple(
        call.model_copy(update={"arguments_raw": ""}) if call.arguments is not None else call
        for call in reply.tool_calls
    )
    return reply.model_copy(update={"tool_calls": calls})


def submitted_handoff(
    inp: c.ModelTurnInput, request: AgentRequest, reply: ModelReply
) -> HandoffFile | None:
    """The handoff file of the output the reply submits, when the node has one and the engine
    will take the reply as a completion (classified as the engine classifies it); None when
    not, or when the file cannot be made (the engine's `write_handoff` then says why)."""
    target = inp.handoff
    if target is None or turn_purpose(inp) != "node":
        return None
    headings = target.headings if target.format == "markdown" else None
    outcome = classify_reply(reply, request.output_schema, headings).outcome
    if not isinstance(outcome, Completed):
        return None
    file = handoff_file(inp.node_id, target.format, outcome.output)
    return file if isinstance(file, HandoffFile) else None


class ModelTurnActivity:
    """Model calls on this worker; what they share comes in through the constructor."""

    def __init__(
        self,
        files: RunFiles,
        providers: ModelProviders,
        batches: BatchDeps,
        live: LiveChannel | None = None,
        transcripts: Transcripts | None = None,
    ) -> None:
        self.files = files
        self.providers = providers
        self.batches = batches
        self.live = live
        self.transcripts = transcripts if transcripts is not None else Transcripts(files)
        self._headers: Lru[tuple[str, str], AgentRequest] = Lru(256)
        #: Whether the header named by each (run, key) is in the store, as far as this worker
        #: knows (it stored or read it, or found it gone).
        self._stored: Lru[tuple[str, str], bool] = Lru(1024)
        #: Each catalog's specs by name, keyed by the catalog (which `RunFiles` shares between
        #: the runs that stored the same one), so runs of one workflow share them too.
        self._catalogs: Lru[int, tuple[object, dict[str, ToolSpec]]] = Lru(64)
        self._parts: Lru[str, dict[str, Any]] = Lru(256)
        #: Each header set's header by reference, its references and (unless its input makes
        #: it) its whole header, by the set's digest, with the parts they were made from.
        self._sets: Lru[str, tuple[dict[str, Any], AgentRequest, HeaderRefs, AgentRequest | None]]
        self._sets = Lru(256)

    @activity.defn(name=c.ACTIVITY_MODEL_TURN)
    async def model_turn(self, inp: c.ModelTurnInput) -> c.ModelTurnResult:
        try:
            # The first beat late: a 5 s turn sends one, not two (`heartbeat.first_beat_s`).
            return await heartbeating(self._model_turn(inp), beat_late=True)
        except BaseException:
            self.files.flush_cached()
            raise

    async def _model_turn(self, inp: c.ModelTurnInput) -> c.ModelTurnResult:
        if not inp.run_id or not inp.node_id or not inp.call_id:
            # What the input leaves out, its activity says: the run, and the call when the
            # activity's id names it.
            call_id = inp.call_id or c.activity_call_id(activity.info().activity_id)
            inp = inp.model_copy(
                update={
                    "run_id": inp.run_id or activity.info().workflow_id,
                    "call_id": call_id,
                    "node_id": inp.node_id or c.call_node(call_id),
                }
            )
        local = not self.files.remote()
        try:
            if local:
                # On the local disk what a turn reads is a stat and a cached read (or a small
                # file), and what it sends goes into the transcript with its reply: no thread
                # hop before the call.
                request, transcript, tools, delta = self._prepare(inp, write=False)
            else:
                # Heartbeating: a store riding out a database restart must not look dead.
                request, transcript, tools, delta = await heartbeating(
                    asyncio.to_thread(self._prepare, inp, write=True)
                )
            persisted = delta.persisted if isinstance(delta, Unwritten) else delta
            if not inp.provider_id:
                # A call to the provider its header names leaves it out.
                inp = inp.model_copy(update={"provider_id": request.provider_id or ""})
        except KeyNotFound:
            # A stored header or item this call refers to is gone (an unsynced blob lost in a
            # machine crash): ask for the items themselves instead of calling the model.
            self.files.flush_cached()
            return c.ModelTurnResult(
                failure=ProviderFailure(
                    kind="transient", message="stored conversation items are missing; resending"
                ),
                refs_missing=True,
            )
        key = c.transcript_key(inp.node_id)
        deltas = LiveDeltas(self.live, inp.run_id, inp.node_id, inp.call_id)
        started = time.monotonic()
        try:
            provider = self.providers.at_hand(inp, local)
            if provider is None:
                # A real provider reads settings.json and may import its SDK for the first
                # time (seconds on a busy machine): off the event loop, so the heartbeat goes on.
                provider = await asyncio.to_thread(self.providers.for_turn, inp)
            with model_span(inp, request) as span:
                try:
                    reply = await provider.complete(request, transcript, tools, deltas.on_delta)
                except ProviderError as exc:
                    span.error(exc.failure.message)
                    span.set({"error.type": exc.failure.kind})
                    raise
                reply = self.providers.priced(reply, request.model)
                record_reply(span, inp, request, reply, transcript)
        except ProviderError as exc:
            record_failure(inp, request, exc.failure.kind)
            if isinstance(delta, Unwritten):
                # What the turn sent is stored all the same: the result says it is.
                await heartbeating(self.files.off_loop(self._append, inp.run_id, key, delta, []))
            else:
                # A header kept for the writes this turn does not make is stored now.
                self.files.flush_cached()
            return c.ModelTurnResult(
                failure=exc.failure,
                persisted_len=persisted,
                ms=elapsed_ms(started),
            )
        finally:
            deltas.finalize()
        latency_ms = elapsed_ms(started)
        # Classified before its raw arguments go (the outcome is the same without them; the
        # submission's JSON need not be made again).
        handoff = submitted_handoff(inp, request, reply)
        reply = compact_reply(reply)
        reads, results = await self.eager_reads(inp, request, reply)
        items: list[TranscriptItem] = [*reply_items(reply), *results]
        if reads is not None:
            # The reply's calls name these results, in order: history need not repeat them.
            anonymous = [
                r.model_copy(update={"tool_call_id": "", "tool_name": ""}) for r in reads.results
            ]
            reads = reads.model_copy(update={"results": anonymous})
        # The reply (and any results) go straight after what this turn sent, synced: the next
        # turn finds them in place, and they are the only full copy of the tools' output.
        # A submission's handoff is stored at the same time, so the node is done in this turn.
        # One thread hop for the turn's writes (a hop costs the loop more than the handoff's
        # small write costs the thread after the transcript's), shared with the writes of the
        # turns ending beside it (`Hops`).
        await heartbeating(
            self.files.off_loop(self._append, inp.run_id, key, delta, items, handoff)
        )
        result = c.ModelTurnResult(
            reply=reply,
            persisted_len=persisted,
            tools=reads,
            ms=latency_ms,
            # Not `handoff_stored`: the workflow works out from the reply what was stored
            # (`submitted_handoff`, as here), so history need not say it.
        )
        # History carries the reply without what the call asked for; the workflow knows it.
        return result.lean(c.turn_asked(inp, self.providers.kind(inp), request.model))

    def _append(
        self,
        run_id: str,
        key: str,
        delta: Unwritten | int,
        items: list[TranscriptItem],
        handoff: HandoffFile | None = None,
    ) -> None:
        """The turn's transcript lines (what it sent, when that is not stored yet, then
        `items`), after the header caches waiting for a write, then the handoff its reply
        submits (if any)."""
        self.files.write_cached()
        if isinstance(delta, Unwritten):
            self.transcripts.write_after(run_id, key, delta, items)
        else:
            self.transcripts.append(run_id, key, delta, items)
        if handoff is not None:
            store_handoff(self.files, run_id, handoff)

    # --- what the provider is sent ------------------------------------------------------

    def prepare(self, inp: c.ModelTurnInput) -> Prepared:
        """Store what this turn adds to the transcript and load what the provider needs:
        the request, the transcript, the tools offered and the transcript's length."""
        request, transcript, tools, persisted = self._prepare(inp, write=True)
        assert isinstance(persisted, int)
        return request, transcript, tools, persisted

    def _prepare(
        self, inp: c.ModelTurnInput, *, write: bool
    ) -> tuple[AgentRequest, list[TranscriptItem], list[ToolSpec], Unwritten | int]:
        """`prepare`; without `write`, what the turn adds to the transcript is left for its
        reply's write (`Unwritten`) instead of being stored now."""
        store = self.files.store
        header_key = f"headers/{inp.header_digest}.json"
        whole = inp.header
        dumped: bytes | None = None
        if whole is None and inp.header_recipe is not None:
            whole, dumped = self.from_recipe(inp)
        if whole is None and inp.header_set:
            whole = self.from_set(inp.run_id, inp.header_set, inp.header_input)
        elif whole is None and inp.header_rest is not None and inp.header_refs is not None:
            whole = self.restored(inp.run_id, inp.header_rest, inp.header_refs)
        if whole is not None:
            header = whole
            # The store is not asked first (writing the cache in the background is cheaper
            # than a round trip on the turn's path): a header this worker stored or read
            # already is not stored again, unless a later turn found it gone.
            if not self._stored.get((inp.run_id, header_key)):
                self._stored.put((inp.run_id, header_key), True)
                data = dumped if dumped is not None else header.model_dump_json().encode()
                self.files.cache_blob(inp.run_id, header_key, data, with_next_write=True)
        else:
            # A header is named by its digest, so what was read once is good for every turn.
            cached = self._headers.get((inp.run_id, header_key))
            if cached is None:
                try:
                    raw = store.get_bytes(inp.run_id, header_key)
                except KeyNotFound:
                    # Lost (a cache): the header travels again, and is stored again.
                    self._stored.put((inp.run_id, header_key), False)
                    raise
                cached = AgentRequest.model_validate_json(raw)
                self._headers.put((inp.run_id, header_key), cached)
                self._stored.put((inp.run_id, header_key), True)
            header = cached
        request = header.model_copy(update={"turn_index": inp.turn_index})
        request = expand_request(store, inp.run_id, request)
        if turn_purpose(inp) == "review":
            request = self._with_conversations(inp.run_id, request)
        key = c.transcript_key(inp.node_id)
        lines = self.transcripts.delta_lines(inp.run_id, inp.delta.items, key)
        persisted: Unwritten | int
        if write:
            persisted = store.append_lines(inp.run_id, key, lines, expected_len=inp.delta.base_len)
            transcript = self.transcripts.appended(inp.run_id, key, inp.delta.base_len, lines)
            if transcript is None:
                transcript = self.transcripts.read(inp.run_id, key)
        else:
            persisted = self.transcripts.unwritten(inp.run_id, key, inp.delta.base_len, lines)
            transcript = [*persisted.kept_items, *persisted.items]
        tools = self.offered(inp.run_id, request.tool_names)
        # Attachments travel as references; their bytes are read in only for the provider.
        request, transcript = resolve_turn(store, inp.run_id, request, transcript)
        return request, transcript, tools, persisted

    def from_recipe(self, inp: c.ModelTurnInput) -> tuple[AgentRequest, bytes]:
        """The header of a call whose input travels as a recipe, and its JSON: the input made
        again from what the run store holds, and the header checked against the call's digest
        (a store that gives back anything else counts as one that lost it)."""
        recipe = inp.header_recipe
        assert recipe is not None
        keys = recipe_keys(recipe)
        # First from the handoffs this worker wrote (the upstream nodes' turns usually ran
        # here); when they make another input than the call's (rewritten since, or restored
        # from a checkpoint), from the store.
        for kept in (True, False) if keys else (False,):
            files = {key: self.files.stored_bytes(inp.run_id, key, kept=kept) for key in keys}
            try:
                made = self._made_from(inp, recipe, files)
            except KeyNotFound:
                if kept:
                    continue
                raise
            if made is not None:
                return made
        raise KeyNotFound("the run store gave back another input than the call's")

    def _made_from(
        self, inp: c.ModelTurnInput, recipe: InputRecipe, files: dict[str, bytes]
    ) -> tuple[AgentRequest, bytes] | None:
        """The call's header and its JSON made with `files`, None when that is not the
        header the call's digest names."""
        try:
            header_input = resolve(inp.header_input, recipe, self._stored_parts(inp.run_id), files)
        except (KeyError, TypeError, ValueError) as exc:
            raise KeyNotFound("the run store lacks what a call's input is made of") from exc
        digest = inp.header_set.removesuffix(RECIPE_MARK)
        header = self.from_set(inp.run_id, digest, header_input)
        data = header.model_dump_json().encode()
        if hashlib.sha256(data).hexdigest()[:16] != inp.header_digest:
            return None
        return header, data

    def from_set(
        self, run_id: str, digest: str, header_input: dict[str, Any] | None
    ) -> AgentRequest:
        """The header from the node's stored header set and the call's input."""
        parts = self._stored_parts(run_id)
        found = parts.get(digest)
        if found is None:
            raise KeyNotFound(f"{c.HEADER_PARTS_KEY} lacks the header set this call names")
        if header_input is not None and not isinstance(header_input, dict):
            raise KeyNotFound(f"{c.HEADER_PARTS_KEY} has no header set {digest!r}")
        # A set is the same for each call of its node, and for every run that stored the same
        # parts (`RunFiles.shared_json` gives them one object): made whole once, it takes
        # each call's input and run (`headers.VARYING`) as they are.
        made = self._sets.get(digest)
        if made is None or made[0] is not parts:
            try:
                rest, refs = from_set(found, None, "")
            except (KeyError, TypeError, ValueError) as exc:
                raise KeyNotFound(f"{c.HEADER_PARTS_KEY} has no header set {digest!r}") from exc
            # The review's evidence is made whole from its input: its header is not kept.
            whole = None if refs.evidence_prompts else self.restored(run_id, rest, refs)
            made = (parts, rest, refs, whole)
            self._sets.put(digest, made)
        _, rest, refs, whole = made
        varying = {"input": header_input, "run_id": run_id}
        if whole is not None:
            return whole.model_copy(update=varying)
        return self.restored(run_id, rest.model_copy(update=varying), refs)

    def restored(self, run_id: str, header: AgentRequest, refs: HeaderRefs) -> AgentRequest:
        """The header with the parts it refers to, from those the run's start stored."""
        parts = self._stored_parts(run_id)
        try:
            return restore(header, refs, parts)
        except (KeyError, TypeError, ValueError) as exc:
            raise KeyNotFound(f"{c.HEADER_PARTS_KEY} lacks a part this call names") from exc

    def _stored_parts(self, run_id: str) -> dict[str, Any]:
        """The parts the run's start stored (read once a run on this worker: a part is named
        by its digest)."""
        parts = self._parts.get(run_id)
        if parts is None:
            try:
                # Kept by the start when it ran on this worker.
                parts = self.files.json_file(run_id, c.HEADER_PARTS_KEY)
            except ValueError as exc:
                raise KeyNotFound(f"{c.HEADER_PARTS_KEY} cannot be read: {exc}") from exc
            if parts is None:
                raise KeyNotFound(f"run {run_id!r} has nothing stored at {c.HEADER_PARTS_KEY!r}")
            if not isinstance(parts, dict):
                raise KeyNotFound(f"{c.HEADER_PARTS_KEY} is not a map of parts")
            self._parts.put(run_id, parts)
        return parts

    def _with_conversations(self, run_id: str, request: AgentRequest) -> AgentRequest:
        """The post-run review's evidence with each node's whole conversation from the store,
        rendered as the reviewer reads it (history carries the evidence without them)."""
        evidence = (request.input or {}).get("runEvidence")
        if not isinstance(evidence, dict):
            return request
        nodes = []
        for node in evidence.get("nodes") or []:
            lines = self.files.store.read_lines(run_id, c.transcript_key(str(node.get("id"))))
            nodes.append({**node, "transcript": [json.loads(line) for line in lines]})
        text, truncated = render_evidence({**evidence, "nodes": nodes})
        return request.model_copy(
            update={"input": {"runEvidence": text, "evidenceTruncated": truncated}}
        )

    def offered(self, run_id: str, names: tuple[str, ...]) -> list[ToolSpec]:
        """The specs of the tools a request offers, from the catalog the run froze at start."""
        if not names:
            return []
        catalog = self.files.json_file(run_id, CATALOG_KEY)
        if not isinstance(catalog, list):
            specs = tool_specs(self.batches.tools).values()
            catalog = [s.model_dump(mode="json") for s in specs]
        # The entry holds its catalog, so no other object takes the catalog's id while it lasts.
        kept = self._catalogs.get(id(catalog))
        if kept is None or kept[0] is not catalog:
            kept = (catalog, {spec["name"]: ToolSpec.model_validate(spec) for spec in catalog})
            self._catalogs.put(id(catalog), kept)
        by_name = kept[1]
        return [by_name[n] for n in names if n in by_name]

    # --- reads run with the reply -------------------------------------------------------

    async def eager_reads(
        self, inp: c.ModelTurnInput, request: AgentRequest, reply: ModelReply
    ) -> tuple[c.ToolBatchResult | None, list[TranscriptItem]]:
        """Run the reply's calls now when every one is a read the node lets through unasked.

        The engine still decides: the workflow feeds these results only for a batch of exactly
        these calls planned from this reply; reads run twice change nothing when it does not.
        """
        calls = reply.tool_calls
        # The review never runs reads at once (its call leaves `eager` out).
        eager = inp.eager and turn_purpose(inp) == "node"
        allowed = EAGER_TOOLS.intersection(request.tool_names) if eager else set()
        if not calls or not all(
            call.name in allowed and call.arguments is not None for call in calls
        ):
            return None, []
        batch = c.ToolBatchInput(
            run_id=inp.run_id,
            batch_id=f"{inp.call_id}-tools",
            node_id=inp.node_id,
            calls=[call.as_call() for call in calls],
            side_effects=False,
        )
        try:
            return await tools_runner.run_tools(self.batches, batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the batch then runs as its own activity, with its retries
            log.warning("reads asked for by %s could not run at once: %s", inp.call_id, exc)
            return None, []


__all__ = ["ModelTurnActivity", "compact_reply", "submitted_handoff", "turn_purpose"]
