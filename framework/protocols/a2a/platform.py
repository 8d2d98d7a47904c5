"""Platform operations as JSON-RPC extension methods ``_cleveragents/{domain}/{operation}``.

They answer on every agent's JSON-RPC endpoint (HTTP and stdio alike), next to the A2A
methods, declared in each card under ``urn:cleveragents:extensions:v1``. Results are
documented in docs/a2a.md. An ASGI middleware picks them out of the request stream
before a2a-sdk's dispatcher sees the request (after the request gate: size, JSON, envelope).

Each call is made by the request's :class:`~framework.protocols.a2a.auth.Caller`. A caller sees
and decides the approvals, budgets and audit records of its own tasks only: another caller's task
is "task not found" (-32001), as over A2A, so task ids do not leak. An ``approver`` lists and
decides every task's pending approvals, and reads every task's budget, audit records and usage.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from a2a.types import AgentCard
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from framework.compiler.card import EXTENSION_URI, card_to_json
from framework.errors import CAError, TaskNotWaiting, UsageError
from framework.protocols.a2a.auth import ANONYMOUS, Caller
from framework.protocols.a2a.wire import to_wire
from framework.protocols.jsonrpc import Code, JsonRpcError, Request, error, error_for, parse_request, result
from framework.runtime.runtime import Runtime
from framework.runtime.task_record import Task
from framework.runtime.usage import since_bound, usage_report

PREFIX = "_cleveragents/"
TASK_NOT_FOUND = -32001
"""A2A's TaskNotFoundError: the answer for a task that does not exist or is another caller's."""
Decider = Callable[[Task, dict[str, Any], Caller], Awaitable[dict[str, Any]]]
"""(task, decision, who decides) -> the task after the decision, as A2A JSON."""


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NameParams(_Params):
    name: str


class ApprovalsListParams(_Params):
    agent: str | None = None


class DecideParams(_Params):
    task_id: str = Field(alias="taskId")
    decision: str = Field(pattern="^(approve|reject|edit|always|answer)$")
    reason: str | None = None
    args: dict[str, Any] | None = None
    text: str | None = Field(default=None, description="The answer to a workflow's ask (decision 'answer').")


class BudgetParams(_Params):
    task_id: str = Field(alias="taskId")


class AuditParams(_Params):
    task_id: str | None = Field(default=None, alias="taskId")
    conversation_id: str | None = Field(default=None, alias="contextId")
    kind: str | None = None
    since_seq: int | None = Field(default=None, alias="sinceSeq", ge=0)
    limit: int = Field(default=100, ge=1, le=1000)


class UsageParams(_Params):
    by: Literal["agent", "model", "caller", "day"] = "agent"
    since: str | None = Field(default=None, description="An ISO time (2026-05-01T09:00) or an age (30m, 2h, 7d).")


METHODS: Mapping[str, tuple[type[_Params] | None, str]] = {
    "registry/list": (None, "registry_list"),
    "registry/get": (NameParams, "registry_get"),
    "approvals/list": (ApprovalsListParams, "approvals_list"),
    "approvals/decide": (DecideParams, "approvals_decide"),
    "budget/status": (BudgetParams, "budget_status"),
    "audit/query": (AuditParams, "audit_query"),
    "usage": (UsageParams, "usage"),
    "diagnostics": (None, "diagnostics"),
}
"""Every platform method: its name after ``_cleveragents/``, its params model (None: takes none) and
the :class:`Platform` method that answers it. The one list: dispatch and the card are made from it."""


@functools.cache
def method_catalog() -> list[dict[str, Any]]:
    """The platform methods as the card's extension params list them: each name and the JSON Schema
    of its params (by name, unknown ones refused), so a client learns them without probing."""
    catalog = []
    for name, (model, _) in METHODS.items():
        schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
        if model is not None:
            full = model.model_json_schema(by_alias=True)
            schema["properties"] = {key: _untitled(value) for key, value in full.get("properties", {}).items()}
            if full.get("required"):
                schema["required"] = full["required"]
        catalog.append({"method": PREFIX + name, "params": schema})
    return catalog


def _untitled(schema: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in schema.items() if key != "title"}


def declare_methods(card: AgentCard) -> AgentCard:
    """``card`` with :func:`method_catalog` in its CleverAgents extension's params (a copy; a card
    whose extension has no params, the public one under ``server.auth``, is returned as it is)."""
    out = AgentCard()
    out.CopyFrom(card)
    for extension in out.capabilities.extensions:
        if extension.uri == EXTENSION_URI and extension.HasField("params"):
            extension.params.update({"methods": method_catalog()})
    return out


class Platform:
    """The ``_cleveragents/*`` methods of one Runtime."""

    def __init__(self, runtime: Runtime, decide: Decider | None = None) -> None:
        self.runtime = runtime
        self.decide_via = decide
        self.methods: dict[str, tuple[type[_Params] | None, Callable[..., Awaitable[Any]]]] = {
            name: (model, getattr(self, handler)) for name, (model, handler) in METHODS.items()
        }

    async def call(self, method: str, params: Mapping[str, Any], caller: Caller = ANONYMOUS) -> Any:
        """The result of a platform method called by ``caller``; an error of the tree answers with its code's number."""
        try:
            return await self._call(method, params, caller)
        except CAError as exc:
            raise error_for(exc) from exc

    async def _call(self, method: str, params: Mapping[str, Any], caller: Caller) -> Any:
        name = method.removeprefix(PREFIX)
        if name not in self.methods:
            known = ", ".join(PREFIX + m for m in self.methods)
            raise JsonRpcError(Code.METHOD_NOT_FOUND, f"unknown method {method!r}; platform methods: {known}")
        model, handler = self.methods[name]
        if model is None:
            if params:
                raise JsonRpcError(Code.INVALID_PARAMS, f"{method} takes no params")
            return await handler()
        if name in _SCOPED:
            return await handler(self._parse(method, model, params), caller)
        return await handler(self._parse(method, model, params))

    @staticmethod
    def _parse(method: str, model: type[_Params], params: Mapping[str, Any]) -> Any:
        try:
            parsed = model.model_validate(params)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in exc.errors())
            raise JsonRpcError(Code.INVALID_PARAMS, f"invalid params for {method}: {problems}") from exc
        return parsed

    async def _task(self, task_id: str, caller: Caller, *, approving: bool = False) -> Task:
        """The task ``task_id`` as ``caller`` may see it: its own, or any task for an approver
        (``approving``: a decision or what it needs); another caller's task is not found."""
        task = await self.runtime.tasks.afind(task_id)
        if task is None or (task.caller != caller.name and not (approving and caller.approver)):
            raise JsonRpcError(TASK_NOT_FOUND, f"task {task_id!r} not found")
        return task

    # -- registry ----------------------------------------------------------------

    async def registry_list(self) -> dict[str, Any]:
        bundle = self.runtime.bundle
        agents = []
        for name, spec in sorted(bundle.agents.items()):
            agents.append(
                {
                    "name": name,
                    "kind": spec.kind,
                    "description": spec.description,
                    "url": bundle.card(name).supported_interfaces[0].url,
                    "source": "project",
                    "tags": sorted({t for s in bundle.project.skills_of(spec) for t in s.tags}),
                    "skills": [
                        {"id": s.id, "name": s.name or s.id, "tags": list(s.tags)}
                        for s in bundle.project.skills_of(spec)
                    ],
                }
            )
        for remote in bundle.directory:
            agents.append(
                {
                    "name": remote.name,
                    "kind": "remote",
                    "description": remote.description,
                    "url": remote.url,
                    "source": f"registry:{remote.registry}",
                    "skills": [{"id": s.id, "name": s.name or s.id, "tags": list(s.tags)} for s in remote.skills],
                    "tags": sorted(set(remote.tags)),
                }
            )
        return {"agents": agents}

    async def registry_get(self, params: NameParams) -> dict[str, Any]:
        card = declare_methods(self.runtime.bundle.card(params.name))  # AgentNotFound: -32084
        return {"card": card_to_json(card)}

    # -- approvals ---------------------------------------------------------------

    async def approvals_list(self, params: ApprovalsListParams, caller: Caller) -> dict[str, Any]:
        mine = None if caller.approver else caller.name
        tasks = await self.runtime.tasks.alist(pending_only=True, limit=500, caller=mine)
        out = []
        for task in tasks:
            if params.agent and task.agent != params.agent:
                continue
            out.append(
                {
                    "taskId": task.id,
                    "contextId": task.conversation,
                    "agent": task.agent,
                    "caller": task.caller,
                    "pending": [
                        {
                            **to_wire(p.payload),
                            "id": p.interrupt_id,
                            "pausedAt": p.paused_at,
                            "expiresAt": p.expires_at,
                            "expired": p.expired(),
                        }
                        for p in task.pending
                    ],
                }
            )
        return {"approvals": out}

    async def approvals_decide(self, params: DecideParams, caller: Caller) -> dict[str, Any]:
        task = await self._task(params.task_id, caller, approving=True)
        if task.state != "input-required":
            raise TaskNotWaiting(f"task {task.id} is {task.state}, not waiting for a decision")
        decision = {"decision": params.decision, "reason": params.reason, "args": params.args, "text": params.text}
        if self.decide_via is None:
            raise JsonRpcError(Code.INTERNAL_ERROR, "decisions are not available on this transport")
        return {"task": await self.decide_via(task, decision, caller)}

    # -- budget, audit, diagnostics -------------------------------------------------

    async def budget_status(self, params: BudgetParams, caller: Caller) -> dict[str, Any]:
        task = await self._task(params.task_id, caller, approving=True)  # an approver deciding a budget ask reads it
        spec = self.runtime.bundle.project.agents.get(task.agent)
        budget = getattr(spec, "budget", None) or self.runtime.bundle.project.config.defaults.budget
        caps = budget.model_dump(mode="json", exclude_none=True) if budget is not None else {}
        return {"taskId": task.id, "state": task.state, "usage": to_wire(task.usage), "budget": to_wire(caps)}

    async def audit_query(self, params: AuditParams, caller: Caller) -> dict[str, Any]:
        """The records matching the filters; a caller's only those of its own tasks (an approver's, all)."""
        if params.task_id is not None:
            await self._task(params.task_id, caller, approving=True)
        query = self.runtime.audit.aquery
        filters = {"task_id": params.task_id, "conversation_id": params.conversation_id, "kind": params.kind}
        if caller.approver:
            records = await query(**filters, since_seq=params.since_seq, limit=params.limit)
            return {"records": [_record(r) for r in records]}
        mine = {t.id for t in await self.runtime.tasks.alist(limit=1_000_000, caller=caller.name)}
        found: list[Any] = []
        since = params.since_seq
        while len(found) < params.limit:
            batch = await query(**filters, since_seq=since, limit=1000)
            found.extend(r for r in batch if r.task_id in mine)
            if len(batch) < 1000:
                break
            since = batch[-1].seq
        return {"records": [_record(r) for r in found[: params.limit]]}

    async def usage(self, params: UsageParams, caller: Caller) -> dict[str, Any]:
        """``ca usage --json`` over the caller's own tasks (an approver's: every task)."""
        try:
            since = since_bound(params.since, option="since") if params.since is not None else None
        except UsageError as exc:
            raise JsonRpcError(Code.INVALID_PARAMS, f"invalid params for {PREFIX}usage: {exc}") from exc
        mine = (
            None
            if caller.approver
            else {t.id for t in await self.runtime.tasks.alist(limit=1_000_000, caller=caller.name)}
        )
        audit = self.runtime.audit
        report = await asyncio.to_thread(
            lambda: usage_report(audit.records(since_ts=since), params.by, since=since, tasks=mine)
        )
        found = report.to_json()
        # camelCase on A2A; a row's ``tools`` keeps its keys: they are the tools' own names.
        return {**found, "groups": [to_wire(row) for row in found["groups"]], "total": to_wire(found["total"])}

    async def diagnostics(self) -> dict[str, Any]:
        bundle = self.runtime.bundle
        return {
            "bundle": bundle.digest,
            "agents": sorted(bundle.agents),
            "warnings": [w.to_json() for w in bundle.project.warnings],
            "errors": [d.to_json() for d in self.runtime.diagnostics],
            "restart": list(self.runtime.restart_needed),
        }


_SCOPED = frozenset({"approvals/list", "approvals/decide", "budget/status", "audit/query", "usage"})
"""The methods whose answer depends on who calls (see the module doc)."""


class PlatformMiddleware:
    """ASGI middleware: answers ``_cleveragents/*`` JSON-RPC calls.

    It sits behind ``RequestGate`` (``framework.protocols.a2a.gate``): bodies reaching it are within
    the size limit and, on JSON-RPC paths, valid JSON-RPC requests.
    """

    def __init__(self, app: ASGIApp, platform: Platform) -> None:
        self.app = app
        self.platform = platform

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        call = _platform_call(raw) if scope["path"].endswith("/") else None
        if call is not None:
            user = scope.get("user")
            await _json(send, 200, await self._answer(call, user if isinstance(user, Caller) else None))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)

    async def _answer(self, obj: dict[str, Any], caller: Caller | None) -> dict[str, Any]:
        try:
            request: Request = parse_request(obj)
            if caller is None:  # behind CallerBackend every request has one: a public path is no endpoint
                raise JsonRpcError(Code.AUTHENTICATION_REQUIRED, "authentication required")
            return result(request.id, await self.platform.call(request.method, request.params, caller))
        except JsonRpcError as exc:
            return error(obj.get("id") if isinstance(obj.get("id"), str | int) else None, exc)


def _platform_call(raw: bytes) -> dict[str, Any] | None:
    """The decoded request when ``raw`` is a ``_cleveragents/*`` call (its keys may come in any order)."""
    if PREFIX.encode() not in raw:
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None  # a2a-sdk answers -32700
    if not isinstance(obj, dict) or not str(obj.get("method", "")).startswith(PREFIX):
        return None
    return obj


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _record(record: Any) -> dict[str, Any]:
    """An audit record on the wire: camelCase keys, its data's too."""
    return {**to_wire(vars(record)), "data": to_wire(record.data)}
