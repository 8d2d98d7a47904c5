"""``ca serve``: every agent of a project as an A2A agent, under one Starlette app.

    /agents/{name}/                               JSON-RPC (A2A v1.0; v0.3 method names too)
    /agents/{name}/rest/...                       HTTP+JSON binding
    /agents/{name}/.well-known/agent-card.json    the agent's card
    /  /.well-known/agent-card.json  /.well-known/agent.json   the default agent
    /healthz  /readyz                             liveness, readiness (framework.protocols.a2a.probes)

Tasks live in a2a-sdk's DatabaseTaskStore (``.ca/state.db`` unless ``store.url`` says
otherwise), behind a WriteBehindTaskStore that skips the writes of a run's intermediate
states (on SQLite through SqliteTaskStore); the Runtime keeps conversations, pending
decisions and the audit.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_data_part
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import DatabaseTaskStore
from a2a.types import AgentCard, Message, Role, SendMessageRequest, TaskState, TaskStatus
from a2a.utils.errors import TaskNotCancelableError
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

from framework.compiler.card import public_card
from framework.errors import AgentNotFound, Failure, RunError, StoreBusy, StoreUnreachable
from framework.protocols.a2a.auth import ANONYMOUS, DECIDED_BY, AuthMiddleware, Caller, CallerBackend, Credentials
from framework.protocols.a2a.executor import CleverAgentExecutor
from framework.protocols.a2a.gate import RequestGate
from framework.protocols.a2a.handler import ServingRequestHandler
from framework.protocols.a2a.orphans import Resumer
from framework.protocols.a2a.platform import Platform, PlatformMiddleware, declare_methods
from framework.protocols.a2a.probes import HEALTH_PATH, READY_PATH, Probes
from framework.protocols.a2a.probes import PATHS as PROBE_PATHS
from framework.protocols.a2a.queues import use_asyncio_queues
from framework.protocols.a2a.relay import LOCAL_POLL_S, TaskFollower
from framework.protocols.a2a.request_metrics import RequestMetrics
from framework.protocols.a2a.required_fields import sort_fields_once
from framework.protocols.a2a.statuses import failure_status
from framework.protocols.a2a.task_store import AgentTaskStore, SqliteTaskStore, WriteBehindTaskStore
from framework.protocols.a2a.tracing import TraceContext, drop_idle_spans
from framework.protocols.jsonrpc import error_for
from framework.protocols.stdio_loop import STOP_GRACE
from framework.runtime import telemetry
from framework.runtime.cancel import StillRunning
from framework.runtime.message_claims import MessageClaims
from framework.runtime.metrics import CONTENT_TYPE, Metrics
from framework.runtime.runtime import Runtime
from framework.runtime.store_locks import in_wal
from framework.runtime.store_url import libpq_url
from framework.runtime.stores import opening, state_dir
from framework.runtime.task_record import FINAL_STATES
from framework.runtime.task_record import Task as Record
from framework.runtime.tasks import TaskStore

A2A_POOL_SIZE = 15
"""Connections to PostgreSQL the A2A task rows use per server (requests past them wait for one)."""
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
CARD_CACHE = "public, max-age=60"
INTERRUPTED = (
    "the server stopped while this task was running; it was not resumed because a tool may have run "
    "halfway: send the message again"
)

SHUT_DOWN = (
    "the server shut down before this task finished (server.shutdown_timeout {timeout:g} s passed); it was "
    "canceled, not resumed, because a tool may have run halfway: send the message again"
)

SHUT_DOWN_NOW = (
    "the server shut down before this task finished (a second Ctrl-C stopped it without waiting); it was "
    "canceled, not resumed, because a tool may have run halfway: send the message again"
)

Endpoint = Callable[[Request], Awaitable[Response]]

logger = logging.getLogger(__name__)


_CLIENT_ERRORS = ("Failed to validate base JSON-RPC request", "Failed to parse request params")


class _ClientErrorsOnOneLine(logging.Filter):
    """a2a-sdk logs a client's malformed JSON-RPC request with a traceback. The client gets a clear
    JSON-RPC error; the server's log gets one line saying what was wrong, not a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and record.getMessage() in _CLIENT_ERRORS:
            record.msg, record.args = f"{record.getMessage()}: {record.exc_info[1]}", ()
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_client_errors() -> None:
    logger = logging.getLogger("a2a.server.routes.jsonrpc_dispatcher")
    if not any(isinstance(f, _ClientErrorsOnOneLine) for f in logger.filters):
        logger.addFilter(_ClientErrorsOnOneLine())


def store_url(runtime: Runtime) -> str:
    """The async SQLAlchemy URL of the task store (relative SQLite paths are under the project)."""
    url = runtime.bundle.project.config.store.url
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[1] if ":///" in url else ".ca/state.db"
        full = Path(path) if Path(path).is_absolute() else runtime.root / path
        state_dir(runtime.root)
        return f"sqlite+aiosqlite:///{full}"
    return "postgresql+asyncpg://" + libpq_url(url).removeprefix("postgresql://")


async def sweep_orphans(runtime: Runtime, store: WriteBehindTaskStore) -> None:
    """With replicas sharing PostgreSQL, settle every ``TaskStore.renew_every`` (a third of the lease) the
    tasks another replica was running when it died (its leases expired), as ``Runtime.open`` settles them
    at start, and write their A2A rows (and those of tasks that ended just before their replica died,
    :func:`write_lagging`): a task is settled at most ``task_lease * 4/3`` after its replica
    stopped renewing."""
    while True:
        await asyncio.sleep(runtime.tasks.renew_every)
        try:
            await write_settled(store, await runtime.settle_orphans())
            await write_lagging(runtime.tasks, store)
        except (StoreBusy, StoreUnreachable) as exc:
            logger.warning("orphaned tasks not looked for: %s", exc)
        except Exception:  # the sweeper must go on: a replica that stops sweeping leaves others' tasks running
            logger.exception("looking for orphaned tasks failed; looking again in %g s", runtime.tasks.renew_every)


async def write_lagging(tasks: TaskStore, store: WriteBehindTaskStore) -> None:
    """Write the A2A rows still running, untouched for a lease, whose records ended a lease ago too: their
    server died between the record's last write and the row's (GetTask derives the end already; the
    row, and subscribers told by its ``NOTIFY``, get it here). A record that ended more recently is
    left to its own server, which writes the whole row (its reply, its usage) just after. A row without
    a record is failed: its server died between the row's first write and the record's, before anything
    ran (unless the row has no time: then nothing tells it from a task whose record is being written now)."""
    before = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=tasks.lease)
    ended = []
    for task_id, owner, dated in await store.stale_running(before):
        record = await tasks.afind(task_id)
        if record is not None and record.state in FINAL_STATES and _ended_before(record, before):
            ended.append(record)
        elif record is None and dated:
            await _fail_row(store, task_id, ServerCallContext(user=TaskOwner(owner)))
    await write_settled(store, ended)


def _ended_before(record: Record, before: datetime) -> bool:
    """Whether ``record`` was last written before ``before`` (naive UTC); one without a time long ago."""
    written = record.last_written()
    return written is None or written.replace(tzinfo=None) < before


async def write_settled(store: WriteBehindTaskStore, settled: list[Record]) -> None:
    """Write the A2A rows of tasks whose records were settled (failed: their process died), so the row
    itself — not only what GetTask derives from the record — shows the end, and subscribers on every
    replica are told (the row's ``NOTIFY``). A task without a row (a child task, a CLI run) is skipped."""
    for record in settled:
        context = ServerCallContext(user=TaskOwner(record.caller))  # the A2A store scopes rows by owner
        row = await store.get(record.id, context)  # its status derived from the settled record
        if row is not None:
            await store.save(row, context)


async def stop_elsewhere(runtime: Runtime, task_id: str, resumed: Collection[str] = ()) -> None:
    """Before a task's A2A row is saved canceled, stop its run when another process runs it.

    With a shared ``store.url`` the SDK answers a CancelTask for a task another replica runs by
    saving its row canceled; the run itself is stopped through the task record, as ``ca tasks
    cancel`` stops it (the owner's CancelWatch sees the request): this waits until it did. A run this
    server resumed (``resumed``, :mod:`.orphans`) has no SDK request either: it is stopped the same way.
    A task that waits for input (paused by a run that ended, here or elsewhere) is canceled through its
    record too, so its pending approvals can no longer be decided. A task whose run ended otherwise
    first (completed, failed) keeps its end: TaskNotCancelableError, and its row is not written.
    """
    record = await runtime.tasks.afind(task_id)
    if record is None or record.state not in ("submitted", "working", "input-required"):
        return
    if record.state != "input-required" and task_id in runtime.watch.runs and task_id not in resumed:
        return  # running here: the SDK, or the direct run (.direct), cancels a run of this process itself
    try:
        await runtime.cancel(task_id)
    except StillRunning:
        raise
    except RunError as exc:  # it ended meanwhile: canceled (the row may say so), or otherwise (it may not)
        ended = await runtime.tasks.afind(task_id)
        if ended is None or ended.state != "canceled":
            raise TaskNotCancelableError(f"task {task_id} cannot be canceled: {exc}") from exc


def task_store(runtime: Runtime, resumed: Collection[str] = ()) -> WriteBehindTaskStore:
    """The A2A task rows (a2a-sdk's store, written behind); ``resumed``: the ids of the runs this server resumed."""
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    url = store_url(runtime)
    records = runtime.tasks.afind  # the one task record: every row's state is derived from it
    stop = lambda task_id: stop_elsewhere(runtime, task_id, resumed)  # noqa: E731 - a cancel here stops the run there
    if not url.startswith("sqlite"):
        # SQLAlchemy's default pool keeps 5 connections and closes every one past them when it is given
        # back: under load each request opened a connection. The same 15 at most, all kept.
        engine = create_async_engine(url, pool_size=A2A_POOL_SIZE, max_overflow=0)
        follower = TaskFollower(engine, libpq_url(url))  # subscribers here relay runs of the other servers
        return WriteBehindTaskStore(DatabaseTaskStore(engine), records=records, follower=follower, stop=stop)
    # Saves and reads go through SqliteTaskStore's own sqlite3 connection; the engine serves
    # initialize, ListTasks and delete. SQLite takes one write at a time: one pooled connection
    # (callers queue on the pool instead of sleeping in SQLite's busy handler, which gave p99
    # latencies of seconds under load), in WAL mode so other processes (`ca tasks`, a second
    # reader) neither block it nor wait for it.
    # The engine's statements wait for another process's write lock in aiosqlite's thread, off the loop.
    lock_timeout = runtime.bundle.project.config.store.lock_timeout
    engine = create_async_engine(url, connect_args={"timeout": lock_timeout}, pool_size=1, max_overflow=0)
    path = Path(url.split(":///", 1)[1])
    # A file that is not a database says so here, in one line, as the other files of .ca/ do: the
    # engine would meet it inside the server's start, in a traceback.
    with opening(path), closing(sqlite3.connect(path)) as probe:
        probe.execute("PRAGMA schema_version")
    event.listen(engine.sync_engine, "connect", lambda connection, _record: _wal(connection, path, lock_timeout))
    store = SqliteTaskStore(engine, path, lock_timeout=lock_timeout)
    follower = TaskFollower(poll=LOCAL_POLL_S)  # subscribers here follow runs without an SDK run here
    return WriteBehindTaskStore(store, records=records, follower=follower, stop=stop)


def _wal(connection: Any, path: Path, lock_timeout: float) -> None:
    cursor = connection.cursor()
    try:
        in_wal(cursor.execute, path=path, timeout=lock_timeout)
    finally:
        cursor.close()


def full_card(runtime: Runtime, name: str) -> AgentCard:
    """The agent's whole card: the compiled one, declaring the platform methods."""
    return declare_methods(runtime.bundle.card(name))


def served_card(runtime: Runtime, name: str) -> AgentCard:
    """The card anyone may fetch: the full one, or a minimal one when auth is on."""
    card = full_card(runtime, name)
    return public_card(card) if runtime.bundle.project.config.server.auth else card


def request_handler(runtime: Runtime, name: str, store: WriteBehindTaskStore) -> DefaultRequestHandler:
    """a2a-sdk's handler for one agent; authenticated callers get the full card from GetExtendedAgentCard."""
    config = runtime.bundle.project.config
    authed = config.server.auth is not None
    rows = AgentTaskStore(store, name)
    return ServingRequestHandler(
        CleverAgentExecutor(runtime, name, rows),
        rows,
        served_card(runtime, name),
        extended_agent_card=full_card(runtime, name) if authed else None,
        follower=store.follower,
        agent=name,
        claims=MessageClaims(runtime.tasks.db, window) if (window := config.server.retry_window) else None,
        records=runtime.tasks.afind,
    )


def agent_routes(runtime: Runtime, name: str, handler: DefaultRequestHandler, prefix: str) -> list[BaseRoute]:
    """The JSON-RPC, REST and card routes of one agent under ``prefix`` (no trailing slash)."""
    card = served_card(runtime, name)
    routes: list[BaseRoute] = [
        *create_agent_card_routes(card, card_url=f"{prefix}{CARD_PATH}", cache_control=CARD_CACHE),
        *create_jsonrpc_routes(handler, rpc_url=f"{prefix}/", enable_v0_3_compat=True),
    ]
    # The REST routes end in a catch-all tenant mount: keep them inside their own prefix.
    routes.append(Mount(f"{prefix}/rest", routes=create_rest_routes(handler, enable_v0_3_compat=True)))
    return routes


class AgentsApp:
    """The routes of one bundle: every agent's endpoints and cards. Replaced whole on reload.

    An agent that is still served keeps its request handler (``previous``): the handler knows the
    tasks it is running, so a task started before a reload can still be canceled or subscribed to.
    """

    def __init__(
        self, runtime: Runtime, store: WriteBehindTaskStore, previous: Mapping[str, DefaultRequestHandler] | None = None
    ) -> None:
        bundle = runtime.bundle
        self.handlers = {name: self._handler(runtime, name, store, previous or {}) for name in bundle.agents}
        routes: list[BaseRoute] = []
        default = bundle.project.default_agent
        if default:
            card = served_card(runtime, default)
            routes.extend(create_agent_card_routes(card, card_url=LEGACY_CARD_PATH, cache_control=CARD_CACHE))
        for name in sorted(bundle.agents):
            routes.extend(agent_routes(runtime, name, self.handlers[name], f"/agents/{name}"))
        routes.append(Route("/agents/{name}/", _no_agent(runtime), methods=["POST"]))
        routes.append(Route("/agents/{name}" + CARD_PATH, _no_agent(runtime), methods=["GET"]))
        if default:
            routes.extend(agent_routes(runtime, default, self.handlers[default], ""))
        self.app = Starlette(routes=routes)

    @staticmethod
    def _handler(
        runtime: Runtime, name: str, store: WriteBehindTaskStore, previous: Mapping[str, DefaultRequestHandler]
    ) -> DefaultRequestHandler:
        """The agent's handler from before the reload, with the new cards; or a new one."""
        handler = previous.get(name)
        if handler is None:
            return request_handler(runtime, name, store)
        handler._agent_card = served_card(runtime, name)  # a2a-sdk reads its capabilities
        auth = runtime.bundle.project.config.server.auth
        handler.extended_agent_card = full_card(runtime, name) if auth else None
        return handler


class Agents:
    """ASGI app that serves the runtime's current bundle; a reload swaps it atomically."""

    def __init__(self, runtime: Runtime, store: WriteBehindTaskStore) -> None:
        self.runtime = runtime
        self.store = store
        self.current = AgentsApp(runtime, store)
        runtime.listeners.append(self.rebuild)

    def rebuild(self) -> None:
        # A request already routed keeps the routes it started with; new ones see the new bundle.
        self.current = AgentsApp(self.runtime, self.store, self.current.handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.current.app(scope, receive, send)

    def running(self) -> list[asyncio.Task[Any]]:
        """The runs in progress of every agent served."""
        return [
            run
            for h in self.current.handlers.values()
            if isinstance(e := h.agent_executor, CleverAgentExecutor)
            for run in e.running()
        ]

    async def stop(self, timeout: float, reason: str | None = None) -> None:
        """Let the runs in progress finish for up to ``timeout`` seconds, then cancel what is left
        (canceled with ``reason``, by default :data:`SHUT_DOWN`; tools stopped) and wait for those runs to end."""
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        reason = reason or SHUT_DOWN.format(timeout=timeout)
        for handler in self.current.handlers.values():
            if isinstance(executor := handler.agent_executor, CleverAgentExecutor):
                executor.stop(reason)
        left = self.running()
        if left:
            await asyncio.wait(left, timeout=STOP_GRACE)


@dataclass(frozen=True)
class Server:
    """The ASGI app of ``ca serve`` and how to stop its runs (see :meth:`Agents.stop`)."""

    app: Starlette
    stop: Callable[[float, str | None, asyncio.Event | None], Awaitable[None]]
    """``stop(timeout, reason, now)``: let the runs finish for ``timeout`` s, or until ``now`` is set,
    then cancel them with ``reason`` (None: :data:`SHUT_DOWN`, or :data:`SHUT_DOWN_NOW` once ``now`` is set)."""


def build_app(runtime: Runtime) -> Starlette:
    """The whole server: authentication, then the request gate and platform methods, then health and the agents."""
    return build_server(runtime).app


def build_server(runtime: Runtime) -> Server:
    """:func:`build_app`, with the means to stop its runs at shutdown."""
    _quiet_client_errors()
    drop_idle_spans()
    use_asyncio_queues()
    sort_fields_once()
    resumer = Resumer(runtime, lambda record: write_settled(store, [record]))
    store = task_store(runtime, resumer.runs)
    agents = Agents(runtime, store)
    config = runtime.bundle.project.config  # its server settings stay as they are now (reload pins them)
    credentials = Credentials(config.server.auth, runtime.bundle.environ) if config.server.auth else None
    from framework.protocols.mcp.http import MCP_PATH, McpEndpoint  # the mcp SDK loads on the first /mcp request

    mcp = McpEndpoint(runtime)
    probes = Probes(runtime, store)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await store.initialize()
        if credentials is None and runtime.source == "a2a-http":
            await adopt_unowned(runtime, store)
        await fail_interrupted(runtime, store)
        runtime.resumer = resumer  # from now on the orphans that can run again are run here
        await write_settled(store, [*runtime.settled_at_open, *await runtime.settle_orphans()])
        if window := runtime.bundle.project.config.server.retry_window:
            await MessageClaims(runtime.tasks.db, window).aprune()  # copies that old are new messages anyway
        sweeper = None if runtime.tasks.db.local else asyncio.create_task(sweep_orphans(runtime, store))
        try:
            yield
        finally:
            if sweeper is not None:
                sweeper.cancel()
            runtime.resumer = None
            await mcp.close()
            await store.close()

    async def decide(task: Record, decision: dict[str, Any], by: Caller) -> dict[str, Any]:
        """A decision travels as a message to the paused task, so the A2A task store sees it too.

        It is sent as the task's owner (the A2A store scopes tasks by owner) on behalf of ``by``,
        who decided (an approver may decide another caller's task: the audit names ``by``)."""
        message = Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            task_id=task.id,
            context_id=task.conversation,
            parts=[new_data_part({k: v for k, v in decision.items() if v is not None})],
        )
        handler = agents.current.handlers.get(task.agent)
        if handler is None:
            raise AgentNotFound(f"agent {task.agent!r} is no longer served")
        context = ServerCallContext(user=TaskOwner(task.caller), state={DECIDED_BY: by.name})
        answer = await handler.on_message_send(SendMessageRequest(message=message), context)
        return dict(json_format.MessageToDict(answer))

    layers = [
        # Every request gets its user (Caller): a2a-sdk makes it the owner of the tasks it sends.
        Middleware(AuthenticationMiddleware, backend=CallerBackend(credentials)),
        Middleware(RequestGate, max_bytes=config.server.max_request_bytes),
        Middleware(PlatformMiddleware, platform=Platform(runtime, decide)),
    ]
    metrics = Metrics(runtime.tasks, config.prices)
    runtime.metrics = metrics
    runtime.audit.observers.append(metrics.audited)
    if telemetry.tracing() is not None:
        layers.insert(0, Middleware(TraceContext))
    if credentials is not None:
        # Outermost: a request is refused from its headers before the gate buffers its body.
        layers.insert(0, Middleware(AuthMiddleware, credentials=credentials, public=lambda p: public_path(runtime, p)))
    # Outside even that: refused requests are counted too (it reads no body, only the first chunk read).
    layers.insert(0, Middleware(RequestMetrics, metrics=metrics))
    app = Starlette(
        routes=[
            Route(HEALTH_PATH, probes.health, methods=["GET"]),
            Route(READY_PATH, probes.ready, methods=["GET"]),
            Route("/metrics", _metrics(metrics), methods=["GET"]),
            Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]),
            Mount("", app=agents),
        ],
        middleware=layers,
        lifespan=lifespan,
    )

    async def stop(timeout: float, reason: str | None = None, now: asyncio.Event | None = None) -> None:
        probes.drain()  # /readyz answers 503 from now on
        runtime.resumer = None  # an orphan found from now on is left to the next server
        hurry = now or asyncio.Event()
        waited = len(agents.running()) + len(resumer.runs)
        if waited and timeout > 0 and not hurry.is_set():
            logger.warning(
                "stopping: waiting up to %gs for %d running task(s); Ctrl-C again cancels them now", timeout, waited
            )
        # Runs may still start meanwhile, on connections kept alive: all of them are waited for.
        deadline = time.monotonic() + timeout
        while (agents.running() or resumer.runs) and time.monotonic() < deadline and not hurry.is_set():
            await asyncio.sleep(0.05)
        reason = reason or (SHUT_DOWN_NOW if hurry.is_set() else SHUT_DOWN.format(timeout=timeout))
        await asyncio.gather(agents.stop(0, reason), resumer.stop(0, reason))

    return Server(app, stop)


class TaskOwner(User):
    """The owner of a task, as a2a-sdk's task store scopes it (``user_name``), for a call made on its behalf."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


def public_path(runtime: Runtime, path: str) -> bool:
    """Whether anyone may fetch ``path`` under ``server.auth``: exactly the probes (``/healthz``,
    ``/readyz``) and the served cards.

    A path that only ends like one (``/agents/x/healthz``, ``/foo/.well-known/agent.json``) is not.
    """
    if path in (*PROBE_PATHS, CARD_PATH, LEGACY_CARD_PATH):
        return True
    name = path.removeprefix("/agents/").removesuffix(CARD_PATH)
    return path == f"/agents/{name}{CARD_PATH}" and name in runtime.bundle.agents


def _no_agent(runtime: Runtime) -> Endpoint:
    async def no_agent(request: Request) -> Response:
        name = request.path_params.get("name", "")
        missing = AgentNotFound.among(name, runtime.bundle.agents)
        if request.method == "GET":
            return JSONResponse({"error": str(missing)}, status_code=404)
        error = error_for(missing)
        try:
            body = await request.json()
        except ValueError:
            body = None
        request_id = body.get("id") if isinstance(body, dict) and isinstance(body.get("id"), str | int) else None
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}, status_code=404)

    return no_agent


async def adopt_unowned(runtime: Runtime, store: WriteBehindTaskStore) -> None:
    """On a server without ``server.auth``, the tasks recorded before tasks had callers are
    :data:`ANONYMOUS`'s, the one caller such a server has: it keeps seeing them after an upgrade.
    (With ``server.auth`` they stay without an owner: only approvers see them.)"""
    await runtime.tasks.aadopt(ANONYMOUS.name, runtime.source)
    await store.adopt_unowned(ANONYMOUS.name)


async def fail_interrupted(runtime: Runtime, store: WriteBehindTaskStore) -> None:
    """End ``failed``, with a reason, the tasks a previous ``ca serve`` was running when it died.

    Only records written before tasks had owners: a task with an owner was settled by
    ``Runtime.open`` if its process is gone (``TaskStore.settle_orphans``), and is left alone if
    that process still runs it (a ``ca approve`` of an A2A task). Nothing runs them any more, and
    running them again could repeat a tool's side effect. Tasks waiting for a decision are
    untouched: they resume when answered. Only tasks of ``ca serve`` (one server per project) are
    touched, never those of ``ca run --stdio`` or the CLI.
    """
    if runtime.source != "a2a-http":
        return
    for task in await runtime.tasks.alist(limit=1_000_000):
        if task.source != runtime.source or task.state not in ("submitted", "working") or task.owner_pid:
            continue
        context = ServerCallContext(user=TaskOwner(task.caller))  # the A2A store scopes rows by owner
        await runtime.tasks.aupdate(task.id, state="failed", error=INTERRUPTED, pending=())
        await runtime.audit.aappend(
            "task.state",
            source="a2a-http",
            task_id=task.id,
            conversation_id=task.conversation,
            agent=task.agent,
            data={"state": "failed", "error": INTERRUPTED},
        )
        await _fail_row(store, task.id, context)


async def _fail_row(store: WriteBehindTaskStore, task_id: str, context: ServerCallContext) -> None:
    """Save the A2A row of a task its dead server was running as failed (:data:`INTERRUPTED`)."""
    stored = await store.get(task_id, context)
    if stored is None or stored.status.state not in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
        return
    state, message = failure_status(Failure.of(RunError(INTERRUPTED)), stored.id, stored.context_id)
    stored.status.CopyFrom(TaskStatus(state=state, message=message))
    stored.status.timestamp.GetCurrentTime()
    await store.save(stored, context)


def _metrics(metrics: Metrics) -> Endpoint:
    async def exposition(request: Request) -> Response:
        # Behind server.auth, and for approvers only: the figures span every caller's tasks.
        user = request.user
        if not (isinstance(user, Caller) and user.approver):
            return JSONResponse(
                {"error": "the metrics span every caller's tasks: they need a credential with the approver role"},
                status_code=403,
            )
        return Response(await metrics.aexposition(), media_type=CONTENT_TYPE)

    return exposition


def describe(runtime: Runtime, base_url: str) -> str:
    """What ``ca serve`` prints when it is ready."""
    count = len(runtime.bundle.agents)
    lines = [f"serving {count} agent{'' if count == 1 else 's'} at {base_url}"]
    default = runtime.bundle.project.default_agent
    for name in sorted(runtime.bundle.agents):
        mark = "  (default, also at /)" if name == default else ""
        lines.append(f"  {name:<16} {base_url}/agents/{name}/{mark}")
    lines.append(
        f"cards: {base_url}/agents/NAME{CARD_PATH}   health: {base_url}{HEALTH_PATH}   ready: {base_url}{READY_PATH}"
    )
    return "\n".join(lines)
