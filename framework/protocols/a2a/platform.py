"""Platform operations as JSON-RPC extension methods ``_cleveragents/{domain}/{operation}``.

They answer on every agent's JSON-RPC endpoint (HTTP and stdio alike), next to the A2A
methods, declared in each card under ``urn:cleveragents:extensions:v1``. Results are
documented in docs/a2a.md. An ASGI middleware picks them out of the request stream
before a2a-sdk's dispatcher sees the request; it also enforces the request size limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from framework.compiler.card import agent_skills, card_to_json
from framework.errors import CAError, RunError, TaskNotWaiting
from framework.protocols.a2a.wire import to_wire
from framework.protocols.jsonrpc import Code, JsonRpcError, Request, error, error_for, parse_request, result
from framework.runtime.runtime import Runtime

PREFIX = "_cleveragents/"
Decider = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""(agent, task id, decision) -> the task after the decision, as A2A JSON."""


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


class Platform:
    """The ``_cleveragents/*`` methods of one Runtime."""

    def __init__(self, runtime: Runtime, decide: Decider | None = None) -> None:
        self.runtime = runtime
        self.decide_via = decide
        self.methods: dict[str, tuple[type[_Params] | None, Callable[..., Awaitable[Any]]]] = {
            "registry/list": (None, self.registry_list),
            "registry/get": (NameParams, self.registry_get),
            "approvals/list": (ApprovalsListParams, self.approvals_list),
            "approvals/decide": (DecideParams, self.approvals_decide),
            "budget/status": (BudgetParams, self.budget_status),
            "audit/query": (AuditParams, self.audit_query),
            "diagnostics": (None, self.diagnostics),
        }

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """The result of a platform method; an error of the tree answers with its code's number."""
        try:
            return await self._call(method, params)
        except CAError as exc:
            raise error_for(exc) from exc

    async def _call(self, method: str, params: Mapping[str, Any]) -> Any:
        name = method.removeprefix(PREFIX)
        if name not in self.methods:
            known = ", ".join(PREFIX + m for m in self.methods)
            raise JsonRpcError(Code.METHOD_NOT_FOUND, f"unknown method {method!r}; platform methods: {known}")
        model, handler = self.methods[name]
        if model is None:
            if params:
                raise JsonRpcError(Code.INVALID_PARAMS, f"{method} takes no params")
            return await handler()
        try:
            parsed = model.model_validate(params)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in exc.errors())
            raise JsonRpcError(Code.INVALID_PARAMS, f"invalid params for {method}: {problems}") from exc
        return await handler(parsed)

    # -- registry ----------------------------------------------------------------

    async def registry_list(self) -> dict[str, Any]:
        bundle = self.runtime.bundle
        agents = []
        for name, spec in sorted(bundle.agents.items()):
            card = card_to_json(bundle.card(name))
            agents.append(
                {
                    "name": name,
                    "kind": spec.kind,
                    "description": spec.description,
                    "url": card["supportedInterfaces"][0]["url"],
                    "source": "project",
                    "tags": sorted({t for s in agent_skills(spec, bundle.project) for t in s.tags}),
                    "skills": [
                        {"id": s.id, "name": s.name or s.id, "tags": list(s.tags)}
                        for s in agent_skills(spec, bundle.project)
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
                    "skills": [],
                    "tags": list(remote.tags),
                }
            )
        return {"agents": agents}

    async def registry_get(self, params: NameParams) -> dict[str, Any]:
        return {"card": card_to_json(self.runtime.bundle.card(params.name))}  # AgentNotFound: -32084

    # -- approvals ---------------------------------------------------------------

    async def approvals_list(self, params: ApprovalsListParams) -> dict[str, Any]:
        tasks = self.runtime.tasks.list(pending_only=True, limit=500)
        out = []
        for task in tasks:
            if params.agent and task.agent != params.agent:
                continue
            out.append(
                {
                    "taskId": task.id,
                    "contextId": task.conversation,
                    "agent": task.agent,
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

    async def approvals_decide(self, params: DecideParams) -> dict[str, Any]:
        try:
            task = self.runtime.tasks.get(params.task_id)
        except RunError as exc:
            raise JsonRpcError(-32001, str(exc)) from exc
        if task.state != "input-required":
            raise TaskNotWaiting(f"task {task.id} is {task.state}, not waiting for a decision")
        decision = {"decision": params.decision, "reason": params.reason, "args": params.args, "text": params.text}
        if self.decide_via is None:
            raise JsonRpcError(Code.INTERNAL_ERROR, "decisions are not available on this transport")
        return {"task": await self.decide_via(task.agent, task.id, decision)}

    # -- budget, audit, diagnostics -------------------------------------------------

    async def budget_status(self, params: BudgetParams) -> dict[str, Any]:
        try:
            task = self.runtime.tasks.get(params.task_id)
        except RunError as exc:
            raise JsonRpcError(-32001, str(exc)) from exc
        spec = self.runtime.bundle.project.agents.get(task.agent)
        budget = getattr(spec, "budget", None) or self.runtime.bundle.project.config.defaults.budget
        caps = budget.model_dump(mode="json", exclude_none=True) if budget is not None else {}
        return {"taskId": task.id, "state": task.state, "usage": to_wire(task.usage), "budget": to_wire(caps)}

    async def audit_query(self, params: AuditParams) -> dict[str, Any]:
        records = await self.runtime.audit.aquery(
            task_id=params.task_id,
            conversation_id=params.conversation_id,
            kind=params.kind,
            since_seq=params.since_seq,
            limit=params.limit,
        )
        return {"records": [{**to_wire(asdict(r)), "data": to_wire(r.data)} for r in records]}

    async def diagnostics(self) -> dict[str, Any]:
        bundle = self.runtime.bundle
        return {
            "bundle": bundle.digest,
            "agents": sorted(bundle.agents),
            "warnings": [w.to_json() for w in bundle.project.warnings],
            "errors": [d.to_json() for d in self.runtime.diagnostics],
            "restart": list(self.runtime.restart_needed),
        }


class PlatformMiddleware:
    """ASGI middleware: answers ``_cleveragents/*`` JSON-RPC calls and limits request size.

    It reads the whole body, so it sits behind ``AuthMiddleware``: only authenticated requests are buffered.
    """

    def __init__(self, app: ASGIApp, platform: Platform, *, max_bytes: int) -> None:
        self.app = app
        self.platform = platform
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await _json(
                    send,
                    413,
                    error(
                        None, JsonRpcError(Code.INVALID_REQUEST, f"request body is larger than {self.max_bytes} bytes")
                    ),
                )
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        call = _platform_call(raw) if scope["path"].endswith("/") else None
        if call is not None:
            await _json(send, 200, await self._answer(call))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)

    async def _answer(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            request: Request = parse_request(obj)
            return result(request.id, await self.platform.call(request.method, request.params))
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
