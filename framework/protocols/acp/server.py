"""The Agent Client Protocol (v1) agent side: an IDE talks to one agent over stdio.

    initialize           answered by acp_hello before the heavy imports; the runtime loads meanwhile
    session/new          a conversation (sessionId = conversation id everywhere); modes = profiles;
                         then available_commands_update with the agent's skills as slash commands
    session/load         replays the conversation as session/update, then answers
    session/prompt       streams session/update; answers {stopReason}
    session/cancel       stops the prompt; updates are flushed before it answers "cancelled"
    session/set_mode     switches the profile; current_mode_update

Approvals become session/request_permission; the client's fs/* methods are used for
fs tools when it offers them (see acp_tools). Only protocol goes to ``out``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from framework.errors import CAError, Diagnostic, ModelError, SpecError
from framework.protocols.acp.hello import initialize_result
from framework.protocols.acp.session import Session
from framework.protocols.jsonrpc import Code, JsonRpcError, answer_id, error_for, parse_request, read_message
from framework.protocols.stdio_loop import LINE_LIMIT, STOP_GRACE, LineReader, run
from framework.spec.common import shown
from framework.spec.root import find_root

logger = logging.getLogger(__name__)

AUTH_REQUIRED = -32000
Handler = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass
class Reply:
    """A result, and what to send right after it (e.g. available_commands_update after session/new)."""

    result: Any
    then: Callable[[], None] | None = None


class AcpServer:
    """One ACP connection: requests in, responses and notifications out."""

    def __init__(
        self,
        root: Path,
        agent: str | None,
        out: TextIO,
        *,
        initialized: bool,
        reload: bool = False,
        pinned: bool = False,
    ) -> None:
        self.root = root
        self.pinned = pinned
        """``-p`` named the project: a session's cwd does not choose it."""
        self.requested_agent = agent
        self.choosing = asyncio.Lock()
        self.reload = reload
        self.watcher: asyncio.Task[None] | None = None
        self.agent_name = agent
        self.out = out
        self.initialized = initialized
        self.client_caps: dict[str, Any] = {}
        self.sessions: dict[str, Session] = {}
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.next_id = 0
        self.stack = AsyncExitStack()
        self.ready: asyncio.Task[Any] | None = None
        self.runtime: Any = None
        self.rows: Any = None
        """The ACP session rows (``SessionStore``), opened with the runtime."""
        self.load_error: SpecError | None = None
        self.methods: dict[str, Handler] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.session_new,
            "session/load": self.session_load,
            "session/prompt": self.session_prompt,
            "session/set_mode": self.session_set_mode,
        }

    # -- wire ------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False) + "\n")
        self.out.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def update(self, session: str, update: dict[str, Any]) -> None:
        self.notify("session/update", {"sessionId": session, "update": update})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Call the client; its answer (raises JsonRpcError on an error answer)."""
        self.next_id += 1
        request_id = self.next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        self.send({"id": request_id, "method": method, "params": params})
        try:
            return await future
        finally:
            self.waiting.pop(request_id, None)

    async def handle(self, line: bytes | str) -> None:
        try:
            message = read_message(line)  # invalid JSON or UTF-8: -32700, id null (there is no id to read)
        except JsonRpcError as exc:
            self._refuse(None, exc)
            return
        if not isinstance(message, dict):
            self._refuse(None, JsonRpcError(Code.INVALID_REQUEST, "expected a JSON object"))
            return
        if "method" not in message and "id" in message:
            future = self.waiting.get(message["id"]) if isinstance(message["id"], int) else None
            if future is not None and not future.done():
                try:
                    future.set_result(_result_of(message))
                except JsonRpcError as exc:
                    future.set_exception(exc)
            return
        try:
            parse_request(message)  # the envelope and values no output could carry; each method checks its params
        except JsonRpcError as exc:
            if exc.code == Code.INVALID_REQUEST or "id" in message:
                self._refuse(answer_id(message), exc)  # null when the id is what is invalid
            return
        await self.dispatch(message)

    def _refuse(self, request_id: Any, exc: JsonRpcError) -> None:
        logger.warning("refused a message: %s %s", exc.code, exc.message)
        self.send({"id": request_id, "error": exc.to_json()})

    async def dispatch(self, message: dict[str, Any]) -> None:
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "session/cancel":
            self.cancel(params)
            if request_id is not None:  # a notification in ACP; sent as a request, it gets its answer
                self.send({"id": request_id, "result": None})
            return
        try:
            if not isinstance(method, str) or method not in self.methods:
                raise JsonRpcError(Code.METHOD_NOT_FOUND, f"unknown method {method!r}")
            if not isinstance(params, dict):
                raise JsonRpcError(Code.INVALID_PARAMS, "params must be an object")
            if method != "initialize" and not self.initialized:
                raise JsonRpcError(Code.INVALID_REQUEST, "call initialize first")
            result = await self.methods[method](params)
        except JsonRpcError as exc:
            if request_id is not None:
                self.send({"id": request_id, "error": exc.to_json()})
            return
        except CAError as exc:  # the error tree's own: its code's number (framework.protocols.jsonrpc)
            if request_id is not None:
                self.send({"id": request_id, "error": error_for(exc).to_json()})
            return
        except Exception as exc:  # a bug of ours: answer it, keep the connection
            logger.error("internal error in %s: %s: %s", method, type(exc).__name__, exc)
            if request_id is not None:
                self.send({"id": request_id, "error": {"code": Code.INTERNAL_ERROR, "message": f"{exc}"}})
            return
        then = None
        if isinstance(result, Reply):
            result, then = result.result, result.then
        if request_id is not None:
            self.send({"id": request_id, "result": result})
        if then is not None:
            then()

    # -- start-up ----------------------------------------------------------------------

    def start_loading(self) -> None:
        self.ready = asyncio.create_task(self._load())

    async def _load(self) -> None:
        from framework.runtime.heap import starting_up

        with starting_up():
            from framework.protocols.a2a import open_remote
            from framework.protocols.mcp import open_mcp
            from framework.runtime.runtime import Runtime
            from framework.spec import load_project

            try:
                project = load_project(self.root)
            except SpecError as exc:
                self.load_error = exc
                return
            self.runtime = await Runtime.open(project, source="acp", stack=self.stack, remote=open_remote, mcp=open_mcp)
        from framework.protocols.acp.sessions import SessionStore

        self.rows = SessionStore(self.runtime.database)  # the runtime's connection, closed with it
        self.agent_name = self.agent_name or project.default_agent
        if self.reload:
            from framework.runtime.reload import watch

            self.runtime.listeners.append(self._reloaded)
            self.watcher = asyncio.create_task(watch(self.runtime))  # reports on stderr, never stdout

    def _reloaded(self) -> None:
        """After a reload: sessions go on; commands (skills) and a vanished mode are re-announced."""
        if self.agent_name not in self.runtime.bundle.agents:
            return
        profiles = self.runtime.bundle.project.profiles
        for session in self.sessions.values():
            if session.mode not in profiles:
                session.mode = self._default_mode()
                self.runtime.profiles[session.id] = session.mode
                self.update(session.id, {"sessionUpdate": "current_mode_update", "currentModeId": session.mode})
            self._announce(session)

    def _warn_if_broken(self, session: Session) -> None:
        """Tell the IDE user that their last edit did not load (the last good version still runs)."""
        errors = self.runtime.diagnostics
        if not errors:
            return
        lines = "\n".join(d.render() for d in errors[:5])
        text = f"[ca] the project has errors; still using the last good version:\n{lines}\n\n"
        self.update(session.id, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})

    async def loaded(self) -> Any:
        assert self.ready is not None
        await asyncio.shield(self.ready)
        if self.load_error is not None:
            raise error_for(self.load_error)  # -32085, every diagnostic in its data
        self.runtime.bundle.agent(self.agent_name)  # AgentNotFound answers -32084
        return self.runtime

    # -- methods -------------------------------------------------------------------------

    async def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.initialized = True
        self.client_caps = params.get("clientCapabilities") or {}
        return initialize_result(params, self.root, self.agent_name)

    async def authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _modes(self, current: str | None) -> dict[str, Any]:
        profiles = self.runtime.bundle.project.profiles
        return {
            "currentModeId": current,
            "availableModes": [
                {"id": name, "name": name, "description": p.description or None} for name, p in sorted(profiles.items())
            ],
        }

    def _default_mode(self) -> str:
        spec = self.runtime.bundle.agent(self.agent_name)
        from framework.runtime.governance.policy import DEFAULT_PROFILE

        return str(spec.profile or self.runtime.bundle.project.config.defaults.profile or DEFAULT_PROFILE)

    def commands(self) -> list[dict[str, Any]]:
        spec = self.runtime.bundle.agent(self.agent_name)
        return [
            {"name": s.id, "description": s.description or s.name or s.id, "input": {"hint": (s.examples or [""])[0]}}
            for s in self.runtime.bundle.project.skills_of(spec)
        ]

    async def _check_model(self) -> None:
        """Compile the agent (off the event loop, as a run would): a model that cannot be built
        (a key unset) is the editor's authentication error now, not the first prompt's."""
        try:
            await self.runtime.bundle.agraph(self.agent_name)
        except ModelError as exc:
            raise JsonRpcError(AUTH_REQUIRED, f"authentication required: {exc}") from exc

    async def use_cwd(self, cwd: str) -> None:
        """Serve the project at or above the session's ``cwd`` (unless ``-p`` named one): the
        project found from the process's folder is replaced while no session uses it yet; after
        that a cwd in another project is refused, and a cwd in no project keeps the one loaded."""
        if self.pinned:
            return
        found = find_root(Path(cwd))
        async with self.choosing:
            assert self.ready is not None
            await asyncio.gather(asyncio.shield(self.ready), return_exceptions=True)
            if found is None:
                if find_root(self.root) is None:  # the process's folder is in no project either
                    raise error_for(no_project(cwd))
                return
            if found == self.root.resolve():
                return
            if self.sessions:
                raise JsonRpcError(
                    Code.INVALID_PARAMS,
                    f"this agent serves the project {self.root}; cwd {cwd} is in the project {found}: "
                    "start another agent for it (or pass -p PROJECT in the agent's command)",
                )
            await self.stack.aclose()
            if self.watcher is not None:
                self.watcher.cancel()
            self.stack, self.runtime, self.rows, self.load_error = AsyncExitStack(), None, None, None
            self.root, self.agent_name = found, self.requested_agent
            self.start_loading()

    async def session_new(self, params: dict[str, Any]) -> Reply:
        cwd = _require(params, "cwd", str)
        _require(params, "mcpServers", list)
        await self.use_cwd(cwd)
        await self.loaded()
        await self._check_model()
        session = Session(uuid.uuid4().hex, params["cwd"], self._default_mode(), mcp=_editor_mcp(params))
        self.sessions[session.id] = session
        self.runtime.profiles[session.id] = session.mode
        await self.rows.asave(session.id, self.agent_name, session.mode or "", session.cwd)
        return Reply({"sessionId": session.id, "modes": self._modes(session.mode)}, lambda: self._announce(session))

    def _announce(self, session: Session) -> None:
        self.update(session.id, {"sessionUpdate": "available_commands_update", "availableCommands": self.commands()})

    async def session_load(self, params: dict[str, Any]) -> Reply:
        session_id = _require(params, "sessionId", str)
        await self.use_cwd(_require(params, "cwd", str))
        await self.loaded()
        saved = await self.rows.aget(session_id)
        if saved is None:
            raise JsonRpcError(-32002, f"session {session_id!r} not found")
        if saved["agent"] != self.agent_name:
            raise JsonRpcError(Code.INVALID_PARAMS, f"session {session_id!r} belongs to agent {saved['agent']!r}")
        session = Session(session_id, params["cwd"], saved["mode"] or self._default_mode(), mcp=_editor_mcp(params))
        self.sessions[session_id] = session
        self.runtime.profiles[session_id] = session.mode
        from framework.protocols.acp.replay import replay

        for update in await replay(self.runtime, str(self.agent_name), session_id):
            self.update(session_id, update)
        return Reply({"modes": self._modes(session.mode)}, lambda: self._announce(session))

    async def session_set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        mode = _require(params, "modeId", str)
        if mode not in self.runtime.bundle.project.profiles:
            known = ", ".join(sorted(self.runtime.bundle.project.profiles))
            raise JsonRpcError(Code.INVALID_PARAMS, f"unknown mode {mode!r}; modes: {known}")
        session.mode = mode
        self.runtime.profiles[session.id] = mode
        await self.rows.asave(session.id, self.agent_name, mode, session.cwd)
        self.update(session.id, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
        return {}

    def _session(self, params: dict[str, Any]) -> Session:
        session_id = _require(params, "sessionId", str)
        if session_id not in self.sessions:
            raise JsonRpcError(-32002, f"session {session_id!r} not found: call session/new or session/load")
        return self.sessions[session_id]

    async def session_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        blocks = _require(params, "prompt", list)
        if session.prompt is not None and not session.prompt.done():
            raise JsonRpcError(Code.INVALID_REQUEST, f"session {session.id} is busy with a prompt; cancel it first")
        from framework.protocols.acp.prompt import PromptTurn

        self._warn_if_broken(session)
        turn = PromptTurn(self, session, blocks)
        session.cancelled = False
        from framework.compiler.builtin_tools import CLIENT_FS
        from framework.compiler.mcp_tools import CLIENT_MCP
        from framework.runtime import telemetry

        # fs tools use the editor's files (unsaved buffers included) when it offers them, and its
        # MCP servers are tools of agents that take them; the prompt's task inherits this context.
        # The prompt's `_meta.traceparent` (ACP reserves the W3C keys, as MCP does) is the parent of its run.
        token = CLIENT_FS.set(self._client_files(session))
        servers = CLIENT_MCP.set(session.mcp)
        try:
            with telemetry.continued(params.get("_meta")):
                session.prompt = asyncio.create_task(turn.run())
        finally:
            CLIENT_MCP.reset(servers)
            CLIENT_FS.reset(token)
        try:
            return await asyncio.shield(session.prompt)
        except asyncio.CancelledError:
            if session.cancelled:
                return {"stopReason": "cancelled"}
            raise

    def _client_files(self, session: Session) -> ClientFiles | None:
        fs = self.client_caps.get("fs") if isinstance(self.client_caps, dict) else None
        if not isinstance(fs, dict) or not (fs.get("readTextFile") and fs.get("writeTextFile")):
            return None
        return ClientFiles(self, session.id)

    def cancel(self, params: Any) -> None:
        session = self.sessions.get(str(params.get("sessionId"))) if isinstance(params, dict) else None
        if session is None:
            return
        session.cancelled = True
        if session.permission is not None and not session.permission.done():
            session.permission.set_result({"outcome": {"outcome": "cancelled"}})
        if session.prompt is not None and not session.prompt.done():
            session.prompt.cancel()


class ClientFiles:
    """The editor's file system, through ACP fs/read_text_file and fs/write_text_file."""

    def __init__(self, server: AcpServer, session_id: str) -> None:
        self.server = server
        self.session_id = session_id

    async def read(self, path: Path) -> str:
        result = await self.server.request("fs/read_text_file", {"sessionId": self.session_id, "path": str(path)})
        if not isinstance(result, dict) or not isinstance(result.get("content"), str):
            raise JsonRpcError(Code.INTERNAL_ERROR, "the editor answered fs/read_text_file without content")
        return str(result["content"])

    async def write(self, path: Path, content: str) -> None:
        await self.server.request(
            "fs/write_text_file", {"sessionId": self.session_id, "path": str(path), "content": content}
        )


def _result_of(answer: dict[str, Any]) -> Any:
    """The result of the client's answer to one of our requests; its error, or what is wrong with
    the answer, as a JsonRpcError (so a malformed answer ends the wait instead of hanging it)."""
    if "error" in answer:
        error = answer["error"]
        if isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str):
            raise JsonRpcError(error["code"], error["message"], error.get("data"))
        raise JsonRpcError(Code.INVALID_REQUEST, f"a malformed error {shown(json.dumps(error))}")
    if "result" not in answer:
        raise JsonRpcError(Code.INVALID_REQUEST, "an answer with neither 'result' nor 'error'")
    return answer["result"]


def _editor_mcp(params: dict[str, Any]) -> tuple[Any, ...]:
    from framework.protocols.acp.mcp_servers import client_servers

    return client_servers(params.get("mcpServers") or [])


def no_project(cwd: str) -> SpecError:
    """The error of a session whose cwd is in no project while the process's folder is in none either."""
    hint = (
        "open the project's folder in the editor, or add '-p /path/to/project' to the agent's command (see docs/ide.md)"
    )
    return SpecError(
        [Diagnostic(cwd, 0, 0, "no CleverAgents project here or in a folder above (no ca.yaml, no agents/)", hint=hint)]
    )


def _require(params: dict[str, Any], name: str, kind: type) -> Any:
    value = params.get(name)
    if not isinstance(value, kind):
        raise JsonRpcError(Code.INVALID_PARAMS, f"missing or invalid param {name!r} (expected {kind.__name__})")
    return value


async def _serve(
    root: Path,
    agent: str | None,
    lines: LineReader,
    out: TextIO,
    first_answered: bool,
    first: bytes,
    reload: bool,
    pinned: bool,
) -> int:
    server = AcpServer(root, agent, out, initialized=first_answered, reload=reload, pinned=pinned)
    server.start_loading()
    in_flight: set[asyncio.Task[None]] = set()
    stopped = False
    if first_answered:  # acp_hello answered initialize: keep what the client offers (fs, terminal)
        params = read_message(first).get("params")
        server.client_caps = (params.get("clientCapabilities") if isinstance(params, dict) else None) or {}
    elif first.strip():  # the raw line: invalid JSON gets its -32700 too
        await server.handle(first)
    try:
        while True:
            line = await lines.read()
            if isinstance(line, int):
                server._refuse(
                    None, JsonRpcError(Code.INVALID_REQUEST, f"a line of {line} bytes is longer than {LINE_LIMIT}")
                )
                continue
            if not line:
                break
            if line.strip():
                task = asyncio.create_task(server.handle(line))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
    except asyncio.CancelledError:
        stopped = True
        raise
    finally:  # end of input, Ctrl-C or SIGTERM: the turns in progress end cancelled before the stores close
        for session in server.sessions.values():
            server.cancel({"sessionId": session.id})
        if stopped:
            await _abandon(server, in_flight)
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
        if server.ready is not None:
            await asyncio.gather(server.ready, return_exceptions=True)
        if server.watcher is not None:
            server.watcher.cancel()
        await server.stack.aclose()  # the stack of the project in use (a session's cwd may have chosen it)
    return 0


async def _abandon(server: AcpServer, in_flight: set[asyncio.Task[None]]) -> None:
    """A stop: the cancelled prompts end (their updates, answers and task records written), then the
    requests still waiting (a compile, the project loading) are cancelled rather than waited for."""
    prompts = [s.prompt for s in server.sessions.values() if s.prompt is not None and not s.prompt.done()]
    if prompts:
        await asyncio.wait(prompts, timeout=STOP_GRACE)
    if in_flight:
        await asyncio.wait(in_flight, timeout=0.5)  # the answers of the prompts just ended
    for task in [*in_flight, *([server.ready] if server.ready is not None else [])]:
        task.cancel()


def run_acp(
    root: Path,
    agent: str | None,
    stdin: BinaryIO,
    out: TextIO,
    *,
    first_answered: bool,
    first: bytes,
    reload: bool = False,
    pinned: bool = False,
) -> int:
    """Serve ACP until the client closes ``stdin`` (this server's alone, see :class:`LineReader`), or
    until Ctrl-C or SIGTERM (exit 130); ``pinned``: ``-p`` chose ``root`` (else a session's cwd may)."""
    return run(_serve(root, agent, LineReader(stdin, LINE_LIMIT), out, first_answered, first, reload, pinned))
