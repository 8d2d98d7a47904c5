"""LangSmith spans of middleware hooks: made when LangSmith traces at compile time, and only then.

create_agent wraps each ``wrap_*`` hook in a langsmith ``traceable``; untraced, that wrapper costs
every model and tool call a span context for nothing, so an agent compiled with tracing off has
its hooks composed as they are.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import HumanMessage
from langsmith import Client, tracing_context
from langsmith.run_helpers import get_current_run_tree

from framework.compiler.agent import RunContext, compile_llm_agent
from framework.compiler.offline import OfflineChatModel
from framework.spec.agent import LlmAgent


class Spy(AgentMiddleware[Any, Any]):
    """Notes the span each model call's hook runs in."""

    def __init__(self) -> None:
        self.spans: list[str | None] = []

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any]:
        run = get_current_run_tree()
        self.spans.append(run.name if run is not None else None)
        return await handler(request)


class LangSmith(BaseHTTPRequestHandler):
    """A LangSmith endpoint on loopback that takes every run it is sent (and keeps the bytes)."""

    received: ClassVar[list[bytes]] = []

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.received.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._answer()

    do_PATCH = do_POST

    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def traced() -> Iterator[None]:
    """LangSmith tracing on, its runs sent to a loopback endpoint."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), LangSmith)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = Client(api_url=f"http://127.0.0.1:{server.server_address[1]}", api_key="test", info={})
    try:
        with tracing_context(enabled=True, client=client):
            yield
    finally:
        client.flush()
        server.shutdown()
        server.server_close()


def hook_spans(*, compiled_traced: bool, run_traced: bool) -> list[str | None]:
    spy = Spy()

    def compiled() -> Any:
        spec = LlmAgent(name="echo")
        return compile_llm_agent(spec, model=OfflineChatModel(agent="echo"), tools=[], skills={}, middleware=[spy])

    async def run(graph: Any) -> None:
        await graph.ainvoke({"messages": [HumanMessage("hello")]}, context=RunContext())

    with traced() if compiled_traced else nullcontext():
        graph = compiled()
    with traced() if run_traced else nullcontext():
        asyncio.run(run(graph))
    return spy.spans


def test_an_agent_compiled_while_langsmith_traces_shows_each_hook_as_a_span() -> None:
    LangSmith.received.clear()
    assert hook_spans(compiled_traced=True, run_traced=True) == ["Spy.awrap_model_call"]
    assert any(b"Spy.awrap_model_call" in body for body in LangSmith.received)  # and LangSmith was sent it


def test_an_agent_compiled_untraced_runs_its_hooks_outside_any_span() -> None:
    assert hook_spans(compiled_traced=False, run_traced=False) == [None]
    # Tracing turned on after the compile traces the run, not its hooks: compile again to see them.
    assert hook_spans(compiled_traced=False, run_traced=True) != ["Spy.awrap_model_call"]
