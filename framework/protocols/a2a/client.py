"""Remote agents: calls over A2A with a2a-sdk's client, as tools of local agents.

* Cards are cached and revalidated with their ETag.
* Every request of a call stays on the origin of the agent's URL, and carries the headers of
  ``ca.yaml`` ``registries[].headers_env`` of exactly that origin (:mod:`.origins`): one pinned
  HTTP client per origin does the card fetches, the registry queries and the JSON-RPC calls.
* Every call has a deadline (``ca.yaml`` ``remote.timeout``). Fetching a card is retried
  with backoff on connection failures and 502/503/504; a message is never sent twice
  (that could start the remote task twice). Anything that goes wrong becomes a tool
  error the model can react to — nothing hangs.
* What the caller has left of its budget and the call depth travel in the message
  metadata (``cleveragents``), so a CleverAgents callee never gets more.
* A callee that pauses for approval pauses the caller: the caller's run is interrupted
  with one pending approval naming the remote agent and its action; the decision is
  sent down to the remote task and the chain resumes. The remote task id is kept in
  ``.ca/tasks.db`` under the caller's task and tool call, so a resumed caller (even in
  a new process) continues the same remote task instead of starting another.
* One client serves every bundle of a runtime, each with its own settings (:meth:`Peers.bundle`):
  a reload that is rejected after it was built changes no credential or deadline of the version
  still serving.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import AgentCard, GetTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from google.protobuf import json_format
from langchain_core.tools import ToolException
from langgraph.types import interrupt

from framework.compiler.agent import CALL_CONTEXT, RunContext
from framework.compiler.bundle import remote_tool_name
from framework.protocols.a2a.origins import Origin, credentials_for, origin_of, pinned_card, pinned_client
from framework.protocols.a2a.registry import discover
from framework.protocols.a2a.wire import EVENT_KEY, from_wire
from framework.runtime.remote import Discovery
from framework.runtime.remote_calls import RemoteCalls
from framework.runtime.tasks import TaskStore
from framework.spec.project import Project

CARD_PATH = ".well-known/agent-card.json"
TRANSIENT_STATUS = {502, 503, 504}
ATTEMPTS = 3
STATES = {
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
}


@dataclass
class RemoteOutcome:
    """Where a remote task stands after a call."""

    state: str = "working"
    text: str = ""
    task_id: str = ""
    context_id: str = ""
    pending: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    usage: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """What the requests of a call take from one version of a project: its registries (their
    credentials, and the agents discovery finds), the environment their variables are read in,
    and the deadline of a call (``remote.timeout``)."""

    project: Project | None
    environ: Mapping[str, str]
    timeout: float


_BUNDLE: ContextVar[Settings | None] = ContextVar("ca_peers_bundle", default=None)
"""The settings of the bundle whose call is running in this context (:meth:`Peers.bundle`)."""


class Peers:
    """The one A2A client: of a Runtime (``agent: URL`` tools, registries) and of ``ca call``.

    Every request goes through a client pinned to one origin (see :mod:`.origins`); cards are
    read the way a2a-sdk's card resolver reads them (v0.3 cards included). ``project`` gives the
    registry credentials (none without one); ``tasks`` keeps the remote task of each tool call
    so a paused call resumes the same remote task (agent tools only). Within :meth:`bundle`, one
    bundle's project and environment take their place, for that call only.
    """

    def __init__(
        self,
        project: Project | None,
        tasks: TaskStore | None,
        environ: Mapping[str, str],
        *,
        timeout: float = 60.0,
        headers: Mapping[Origin, Mapping[str, str]] | None = None,
    ) -> None:
        self.tasks = tasks
        self.own = Settings(project, environ, timeout)
        self.headers = dict(headers or {})
        """Headers given for one origin (``ca call --header/--token``), on top of its registry's."""
        self.clients: dict[tuple[Origin, float], httpx.AsyncClient] = {}
        self.cards: dict[str, tuple[str, AgentCard]] = {}

    @contextmanager
    def bundle(self, project: Project, environ: Mapping[str, str]) -> Iterator[None]:
        """Within, the calls of this context (and the tasks it starts) use ``project``'s registries and
        ``remote.timeout`` and read variables in ``environ``: those of one bundle, whatever the others use."""
        token = _BUNDLE.set(Settings(project, environ, project.config.remote.timeout))
        try:
            yield
        finally:
            _BUNDLE.reset(token)

    @property
    def settings(self) -> Settings:
        """The settings in effect: the running bundle's, else this client's own."""
        return _BUNDLE.get() or self.own

    async def discover(self) -> Discovery:
        """The agents of the project's registries (see :mod:`framework.protocols.a2a.registry`)."""
        project = self.settings.project
        return await discover(project.config.registries if project is not None else [], self.client_for, self.card)

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            await client.aclose()

    def client_for(self, url: str) -> httpx.AsyncClient:
        """The HTTP client of ``url``'s origin: its requests go nowhere else and carry that origin's credentials."""
        origin, timeout = origin_of(url), self.settings.timeout
        client = self.clients.get((origin, timeout))
        if client is None:

            def credentials() -> dict[str, str]:  # read per request: bundles differ in project and environ
                given = dict(self.headers.get(origin, {}))
                settings = self.settings
                if settings.project is None:
                    return given
                return {**credentials_for(origin, settings.project.config.registries, settings.environ), **given}

            client = pinned_client(origin, credentials, timeout=httpx.Timeout(timeout, connect=5.0))
            self.clients[origin, timeout] = client
        return client

    async def _get(self, url: str, headers: dict[str, str]) -> httpx.Response:
        delay = 0.2
        for attempt in range(ATTEMPTS):
            try:
                response = await self.client_for(url).get(url, headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt == ATTEMPTS - 1:
                    raise ToolException(f"cannot reach {url}: {type(exc).__name__}") from exc
            except httpx.HTTPError as exc:  # a read timeout, a dropped connection: not transient enough to retry
                raise ToolException(f"cannot read {url}: {type(exc).__name__}: {exc}") from exc
            else:
                if response.status_code not in TRANSIENT_STATUS or attempt == ATTEMPTS - 1:
                    return response
            await asyncio.sleep(delay)
            delay *= 3
        raise ToolException(f"cannot reach {url}")  # pragma: no cover - the loop returns or raises

    async def card(self, url: str) -> AgentCard:
        """The agent card at ``url`` (cached; revalidated with If-None-Match)."""
        base = url if url.endswith("/") else url + "/"
        cached = self.cards.get(base)
        headers = {"If-None-Match": cached[0]} if cached is not None and cached[0] else {}
        response = await self._get(base + CARD_PATH, headers)
        if response.status_code == 304 and cached is not None:
            known: AgentCard = cached[1]
            return known
        if response.status_code != 200:
            raise ToolException(f"{base} has no agent card (HTTP {response.status_code})")
        try:
            data = response.json()
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__} instead of an object")
            card: AgentCard = parse_agent_card(data)  # as the SDK's resolver does: v0.3 fields mapped
        except (ValueError, json_format.ParseError) as exc:
            raise ToolException(f"{base} answered something that is not an agent card: {exc}") from exc
        self.cards[base] = (response.headers.get("etag", ""), card)
        return card

    async def open(self, url: str) -> tuple[AgentCard, Any]:
        """The card of the agent at ``url`` and a2a-sdk's client for it, on its origin's pinned HTTP client."""
        card = pinned_card(await self.card(url), url)
        config = ClientConfig(streaming=card.capabilities.streaming, httpx_client=self.client_for(url))
        try:
            return card, ClientFactory(config).create(card)
        except Exception as exc:  # a card without an interface a2a-sdk's client can use
            raise ToolException(f"{url}: its agent card offers no usable interface: {exc}") from exc

    async def send(
        self,
        url: str,
        parts: list[Part],
        *,
        task_id: str = "",
        context_id: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> RemoteOutcome:
        """Send one message and follow the task until it ends or waits for input."""
        _, client = await self.open(url)
        message = Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, task_id=task_id, context_id=context_id
        )
        if metadata:
            message.metadata.update(metadata)
        outcome = RemoteOutcome(task_id=task_id, context_id=context_id)
        timeout = self.settings.timeout
        try:
            async with asyncio.timeout(timeout):
                async for event in client.send_message(SendMessageRequest(message=message)):
                    _follow(outcome, event)
                    _progress(event, remote_tool_name(url))
        except TimeoutError as exc:
            raise ToolException(f"remote agent {url} did not answer within {timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise ToolException(f"remote agent {url} failed: {type(exc).__name__}: {exc}") from exc
        except ToolException:
            raise
        except Exception as exc:  # a2a-sdk's client errors (garbage answers, protocol errors)
            raise ToolException(f"remote agent {url} answered with an error: {type(exc).__name__}: {exc}") from exc
        return outcome

    async def status(self, url: str, task_id: str) -> RemoteOutcome:
        _, client = await self.open(url)
        try:
            async with asyncio.timeout(self.settings.timeout):
                task = await client.get_task(GetTaskRequest(id=task_id))
        except ToolException:
            raise
        except Exception as exc:
            raise ToolException(f"remote agent {url}: cannot read task {task_id}: {exc}") from exc
        outcome = RemoteOutcome(task_id=task_id)
        event = StreamResponse()
        event.task.CopyFrom(task)
        _follow(outcome, event)
        return outcome

    async def call_tool(self, url: str, text: str) -> tuple[str, dict[str, Any]]:
        """A remote agent as a tool: its answer (and usage) or a ToolException; pauses bubble up."""
        context = CALL_CONTEXT.get() or RunContext()
        assert self.tasks is not None, "agent tools need the runtime's task store"
        key = f"{context.task_id}:{context.call_id}" if context.task_id and context.call_id else ""
        calls = RemoteCalls(self.tasks.db)
        known = await calls.afind(key) if key else None
        metadata = {
            "cleveragents": {
                "depth": context.depth,
                "caps": dict(context.caps or {}),
                "parentTask": context.task_id,
                "chain": [*context.chain, url],
            }
        }
        if known is None:
            outcome = await self.send(url, [new_text_part(text)], metadata=metadata)
            if key and outcome.task_id:
                await calls.asave(key, url, outcome.task_id, outcome.context_id)
        else:
            outcome = await self.status(url, known["task_id"])
            outcome.context_id = known["context_id"]
        while outcome.state == "input-required":
            card = await self.card(url)
            first = outcome.pending[0] if outcome.pending else {}
            decision = interrupt(
                {
                    "kind": "approval",
                    "agent": first.get("agent", card.name),
                    "tool": first.get("tool", "agent"),
                    "args": first.get("args", {}),
                    "message": f"{card.name} (remote, {url}): {first.get('message') or outcome.message}",
                    "remote": url,
                    "remoteTask": outcome.task_id,
                    "options": ["approve", "reject"],
                }
            )
            data = decision if isinstance(decision, dict) else {"decision": "approve" if decision else "reject"}
            data = {k: v for k, v in data.items() if k in ("decision", "reason", "args") and v is not None}
            outcome = await self.send(
                url, [new_data_part(data)], task_id=outcome.task_id, context_id=outcome.context_id, metadata=metadata
            )
        if outcome.state == "completed":
            return outcome.text, {"usage": outcome.usage, "remote": url}
        reason = outcome.message or outcome.text or "no reason given"
        raise ToolException(f"remote agent {url} ended {outcome.state}: {reason}")


def _progress(event: StreamResponse, agent: str) -> None:
    """Pass a remote callee's progress (its tool calls, steps, reply chunks) to the caller's stream."""
    from langgraph.config import get_stream_writer

    context = CALL_CONTEXT.get()
    if context is None:
        return
    if event.HasField("status_update") and event.status_update.status.HasField("message"):
        for data in get_data_parts(list(event.status_update.status.message.parts)):
            if isinstance(data, dict) and isinstance(data.get(EVENT_KEY), dict):
                event_data = from_wire(data[EVENT_KEY])
                _emit(get_stream_writer, {"ca_event": "child", "agent": agent, "event": event_data})
    elif event.HasField("artifact_update") and event.artifact_update.append:
        chunk = _text(event.artifact_update.artifact.parts)
        if chunk:
            _emit(get_stream_writer, {"ca_event": "child", "agent": agent, "event": {"kind": "text", "text": chunk}})


def _emit(writer_factory: Any, payload: dict[str, Any]) -> None:
    try:
        writer = writer_factory()
    except RuntimeError:  # not inside a graph run (a direct call): nobody to tell
        return
    writer(payload)


def _text(parts: Any) -> str:
    return "".join(get_text_parts(list(parts)))


def _follow(outcome: RemoteOutcome, event: StreamResponse) -> None:
    """Fold one streamed event (or a whole task) into the outcome."""
    if event.HasField("task"):
        task = event.task
        outcome.task_id, outcome.context_id = task.id or outcome.task_id, task.context_id or outcome.context_id
        outcome.text = "\n".join(_text(a.parts) for a in task.artifacts) or outcome.text
        _status(outcome, task.status)
        if task.HasField("metadata"):
            _usage(outcome, json_format.MessageToDict(task.metadata))
    elif event.HasField("status_update"):
        update = event.status_update
        outcome.task_id, outcome.context_id = update.task_id or outcome.task_id, update.context_id or outcome.context_id
        _status(outcome, update.status)
        if update.HasField("metadata"):
            _usage(outcome, json_format.MessageToDict(update.metadata))
    elif event.HasField("artifact_update"):
        update = event.artifact_update
        chunk = _text(update.artifact.parts)
        outcome.text = outcome.text + chunk if update.append else chunk
    elif event.HasField("message"):
        outcome.text = _text(event.message.parts)
        outcome.state = "completed"


def _status(outcome: RemoteOutcome, status: Any) -> None:
    state = STATES.get(status.state)
    if state is None:
        return
    outcome.state = state
    if status.HasField("message"):
        outcome.message = _text(status.message.parts)
        for data in get_data_parts(list(status.message.parts)):
            if isinstance(data, dict) and isinstance(data.get("pending"), list):
                outcome.pending = [p for p in data["pending"] if isinstance(p, dict)]


def _usage(outcome: RemoteOutcome, metadata: dict[str, Any]) -> None:
    usage = from_wire(metadata).get("usage")
    if isinstance(usage, dict):
        # Counts stay integers (a remote's 12 is not 12.0 in our records and on our wire); money is a float.
        outcome.usage = {
            k: float(v) if k.endswith("_usd") else int(v)
            for k, v in usage.items()
            if isinstance(v, int | float) and k != "total_tokens"
        }
