"""Opening a runtime: the project's stores, each opened once and closed by the caller's stack, and
the compiler wired to them (governance, remote agents, MCP servers, in-process agent calls).

``Runtime.open`` calls :func:`wire` and builds the :class:`~framework.runtime.runtime.Runtime` on
what it returns. The task database is opened here once per process (``schema.connect``): the task
records, the turns and ACP's session rows share its connections.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, cast

from framework.compiler.agent import RunContext
from framework.compiler.bundle import Bundle, build_bundle
from framework.compiler.mcp_tools import McpServers
from framework.compiler.model_http import loop_clients
from framework.compiler.models import ModelHook
from framework.compiler.tools import ToolHook
from framework.errors import RunError
from framework.runtime import logs, telemetry
from framework.runtime.audit import AuditLog
from framework.runtime.audit_chain import chain_key
from framework.runtime.governance.access import CapabilityAccess
from framework.runtime.governance.graphs import governance_middleware
from framework.runtime.governance.secrets import KNOWN, mask_logs, project_secrets
from framework.runtime.metrics import Meter
from framework.runtime.remote import Discovery, RemoteFactory
from framework.runtime.schema import connect
from framework.runtime.stores import open_checkpointer
from framework.runtime.task_record import TaskState
from framework.runtime.tasks import TaskStore
from framework.runtime.turns import Turns
from framework.spec.interpolate import load_dotenv
from framework.spec.project import Project

McpFactory = Callable[[Project, Mapping[str, str]], Any]
"""(project, environment) -> the MCP client side (``framework.protocols.mcp.open_mcp``), with ``close()``
and ``declared_by(project, environ)``, the :class:`McpServers` of one bundle."""


@dataclass(frozen=True)
class Wired:
    """What a runtime runs on: its first bundle, its stores, and how to compile the project again (reloads)."""

    bundle: Bundle
    tasks: TaskStore
    audit: AuditLog
    turns: Turns
    compile_project: Callable[[Project], Awaitable[Bundle]]
    meter: Meter
    serving: Callable[[Bundle], Awaitable[None]]
    """Told which bundle serves once a reload is decided: the MCP servers only others started stop."""
    abandoned: Callable[[Bundle], None]
    """Told of a bundle whose reload a newer change abandoned: its compile still running starts no MCP server."""


async def wire(
    project: Project,
    *,
    stack: AsyncExitStack,
    governed: bool = True,
    base_url: str | None = None,
    remote: RemoteFactory | None = None,
    mcp: McpFactory | None = None,
    model_hook: ModelHook | None = None,
    tool_hook: ToolHook | None = None,
) -> Wired:
    """Open the project's stores (closed by ``stack``) and compile its bundle; see ``Runtime.open``."""
    mask_logs()
    key = chain_key(project.config.audit, project.root)  # a missing key stops us before anything opens
    lock_timeout = project.config.store.lock_timeout
    store_url = project.config.store.url
    await stack.enter_async_context(loop_clients())  # closed last: the models' HTTP client, once the runs are over
    saver = await stack.enter_async_context(open_checkpointer(project.root, lock_timeout=lock_timeout, url=store_url))
    database = connect(project.root, store_url, lock_timeout=lock_timeout)  # one per process, for every store
    stack.callback(database.close)
    tasks, turns = TaskStore(database, lease=project.config.store.task_lease), Turns(database)
    dotenv = load_dotenv(project.root)
    KNOWN.add(project_secrets(project, {**dotenv, **os.environ}, dotenv))
    if key is not None:
        KNOWN.add([key.secret.decode("utf-8")])
    audit = AuditLog.of_project(project, key=key, lock_timeout=lock_timeout)
    stack.callback(audit.close)
    audit.check_extendable()
    audit.observers.append(logs.audited)  # at INFO: shown by --log-format json
    tracing = telemetry.start()
    if tracing is not None:
        audit.observers.append(tracing.audited)
        stack.callback(tracing.flush)
    opened: list[Any] = []  # the A2A client side, created on first use (a2a's client costs ~50 ms)

    def peers() -> Any:
        if remote is None:
            raise RunError("remote agents need the A2A client, which this runtime was opened without")
        if not opened:
            opened.append(remote(project, tasks, {**load_dotenv(project.root), **os.environ}))
            stack.push_async_callback(opened[0].close)
        return opened[0]

    hooks = ChildTasks(tasks, audit)
    meter = Meter()  # every agent's model and tool calls measured, once a server has metrics
    model_hook, tool_hook = meter.models(model_hook), meter.tools(tool_hook)
    servers: list[Any] = []  # the MCP client side, one for the runtime's whole life

    def mcp_servers(project: Project, environ: Mapping[str, str]) -> McpServers | None:
        """The MCP client side as the bundle of ``project`` uses it (its own declarations, whatever
        a later bundle declares: one that is built, then rejected, changes nothing for this one)."""
        if mcp is None:  # the client side costs nothing until a server starts (an editor may pass one)
            return None
        if not servers:
            servers.append(mcp(project, environ))
            stack.push_async_callback(servers[0].close)
        return cast(McpServers, servers[0].declared_by(project, environ))

    async def compile_project(project: Project) -> Bundle:
        dotenv = load_dotenv(project.root)
        environ = {**dotenv, **os.environ}
        KNOWN.add(project_secrets(project, environ, dotenv))
        # The clients are shared by every bundle; each call uses its own bundle's settings, so a
        # bundle built and then rejected (a reload that does not compile) changes nothing in use.

        async def call_remote(url: str, text: str) -> tuple[str, dict[str, Any]]:
            client = peers()
            with client.bundle(project, environ):
                result: tuple[str, dict[str, Any]] = await client.call_tool(url, text)
            return result

        found = Discovery()
        if project.config.registries and remote is None:
            found.problems.append("registries are not read: this runtime has no A2A client")
        elif project.config.registries:
            client = peers()
            with client.bundle(project, environ):
                found = await client.discover()
        for problem in found.problems:
            print(f"warning: {problem}", file=sys.stderr)
        return build_bundle(
            project,
            checkpointer=saver,
            middleware=governance_middleware if governed else None,
            access=CapabilityAccess if governed else None,
            mask=KNOWN.text,
            remote=call_remote,
            call_hooks=hooks,
            directory=found.agents,
            mcp=mcp_servers(project, environ),
            base_url=base_url,
            environ=environ,
            model_hook=model_hook,
            tool_hook=tool_hook,
        )

    async def serving(bundle: Bundle) -> None:
        if bundle.mcp is not None:
            await cast(Any, bundle.mcp).retire_others()  # the hub's view of that bundle (mcp_servers above)

    def abandoned(bundle: Bundle) -> None:
        if bundle.mcp is not None:
            cast(Any, bundle.mcp).abandon()

    return Wired(await compile_project(project), tasks, audit, turns, compile_project, meter, serving, abandoned)


class ChildTasks:
    """In-process agent calls as tasks of their own: a parent link, visible in `ca tasks list` and the audit."""

    def __init__(self, tasks: TaskStore, audit: AuditLog) -> None:
        self.tasks = tasks
        self.audit = audit

    async def started(self, agent: str, text: str, context: RunContext) -> RunContext:
        # One task per (parent task, tool call): a resumed caller re-enters the same child task.
        key = f"{context.task_id}/{context.call_id}"
        child_id = uuid.uuid5(uuid.NAMESPACE_URL, key).hex if context.task_id and context.call_id else ""
        try:
            task = await self.tasks.aget(child_id) if child_id else None
        except RunError:
            task = None
        if task is None:
            parent = await self.tasks.afind(context.task_id) if context.task_id else None
            task = await self.tasks.acreate(
                agent=agent,
                conversation=context.conversation_id,
                source="agent-call",
                input=text,
                parent=context.task_id,
                task_id=child_id or None,
                caller=parent.caller if parent is not None else "",
            )
            await self._record(task.id, context, agent, "submitted", parent=context.task_id)
        tracing = telemetry.tracing()
        if tracing is not None and context.task_id:
            tracing.alias(task.id, context.task_id)
        await self.tasks.aset(task.id, state="working")
        self.tasks.calls.add(task.id)
        await self._record(task.id, context, agent, "working")
        return dataclasses.replace(context, task_id=task.id)

    async def finished(
        self,
        context: RunContext,
        *,
        state: str,
        output: str = "",
        error: str = "",
        usage: Mapping[str, float] | None = None,
    ) -> None:
        self.tasks.calls.discard(context.task_id)
        agent = (
            await self.tasks.aupdate(
                context.task_id,
                state=cast(TaskState, state),
                output=output,
                error=error,
                usage=dict(usage) if usage else None,
            )
        ).agent
        await self._record(context.task_id, context, agent, state, error=error or None)

    async def _record(self, task_id: str, context: RunContext, agent: str, state: str, **data: Any) -> None:
        await self.audit.aappend(
            "task.state",
            source="agent-call",
            task_id=task_id,
            conversation_id=context.conversation_id,
            agent=agent,
            data={"state": state, **{k: v for k, v in data.items() if v is not None}},
        )
