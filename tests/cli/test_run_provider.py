"""A real provider integration (langchain-openai) against a local OpenAI-compatible server.

The server is the edge we do not own, so it is the one thing faked here: a small
Starlette app on loopback that streams a chat completion the way OpenAI does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from framework.compiler.model_http import loop_clients, sdk_httpx
from framework.compiler.models import build_model
from framework.spec.model import ModelConfig
from tests.conftest import ProjectFactory, events, run_ca
from tests.fake_openai import FakeOpenAI

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

REPLY = "Hello from the fake provider"


def _chunk(delta: dict[str, object], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


async def completions(request: Request) -> Response:
    body = await request.json()
    request.app.state.requests.append(body)
    request.app.state.seen.append((request.headers.get("authorization"), request.headers.get("cookie")))
    response = await _answer(body)
    # as a gateway might: a session cookie for the key that asked
    key = (request.headers.get("authorization") or "").rpartition(" ")[2]
    response.set_cookie("gateway_session", f"of-{key}", path="/")
    return response


async def _answer(body: dict[str, object]) -> Response:
    if not body.get("stream"):
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": "fake-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
            }
        )

    async def stream() -> AsyncIterator[str]:
        yield _chunk({"role": "assistant", "content": ""})
        for word in REPLY.split(" "):
            yield _chunk({"content": word + " "})
        yield _chunk({}, "stop")
        usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
        yield f"data: {json.dumps({'id': 'chatcmpl-1', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'fake-model', 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def provider() -> Iterator[Starlette]:
    """The fake provider's app, serving on loopback at ``app.state.port``: ``app.state.requests`` holds
    each request's body, ``app.state.seen`` its (Authorization, Cookie) headers."""
    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    app.state.requests = []
    app.state.seen = []
    app.state.port = port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield app
    server.should_exit = True
    thread.join(timeout=5)


@pytest.fixture
def fake_openai(provider: Starlette) -> tuple[str, list[dict[str, object]]]:
    return f"http://127.0.0.1:{provider.state.port}/v1", provider.state.requests


def _project(make_project: ProjectFactory, base_url: str) -> Path:
    return make_project(
        {
            "agents/remote.yaml": f"""
                name: remote
                instructions: Be brief.
                model:
                  provider: openai
                  name: fake-model
                  base_url: {base_url}
                  api_key_env: FAKE_PROVIDER_KEY
                  params: {{max_retries: 0, timeout: 5}}
            """
        }
    )


def test_openai_compatible_server_streams_through_ca_run(
    make_project: ProjectFactory, fake_openai: tuple[str, list[dict[str, object]]]
) -> None:
    url, requests = fake_openai
    root = _project(make_project, url)
    result = run_ca("run", "remote", "hi there", "--json", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-test"})
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    assert "".join(e["text"] for e in evs if e["kind"] == "text").strip() == REPLY
    assert evs[-1]["state"] == "completed"
    sent = requests[0]
    assert sent["model"] == "fake-model"
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["messages"][-1]["content"] == "hi there"
    assert "Unclosed" not in result.stderr  # the model's aiohttp session and connector were closed


@pytest.mark.parametrize(
    ("answer", "reason"),
    [(b"", "(Server disconnected)"), (b"HELLO THERE\r\n\r\n", "(400, message: Bad status line: ")],
    ids=["drops", "answers-no-http"],
)
def test_a_model_server_that_breaks_the_exchange_is_a_connection_error(
    make_project: ProjectFactory, answer: bytes, reason: str
) -> None:
    """A server that reads the request and closes the connection without an answer, or answers
    something that is not HTTP: the user is told the connection failed, as with the SDK's default
    client, and how, not that the server was slow (nor an HTTP status that nobody sent)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):  # accept fails once the test closes the listener: the end
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    with listener:
        root = _project(make_project, f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
        result = run_ca("run", "remote", "hi", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-test"})
    assert result.returncode == 1
    assert "(openai:fake-model at http://127.0.0.1:" in result.stderr
    assert "ConnectionError: Connection error. " + reason in result.stderr, result.stderr  # what broke, said
    assert "timed out" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_of_the_official_api_still_asks_for_the_usage_of_its_streamed_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """langchain-openai asks OpenAI for a streamed answer's usage (tokens: budgets, cost, ``ca usage``)
    only with its own HTTP client; with the aiohttp one the model still asks."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = build_model(ModelConfig(provider="openai", name="gpt-4o-mini"), agent="a", environ={"OPENAI_API_KEY": "k"})
    assert type(model.http_async_client).__name__ == "LoopClient"  # type: ignore[attr-defined]
    assert model.stream_usage is True  # type: ignore[attr-defined]


@pytest.mark.parametrize("where", ["environment", "params"])
def test_a_model_with_an_openai_proxy_is_built_and_calls_through_it(
    monkeypatch: pytest.MonkeyPatch, where: str, fake_openai: tuple[str, list[dict[str, object]]]
) -> None:
    """``openai_proxy`` (params, or ``OPENAI_PROXY``) is langchain-openai's own, which refuses any
    other HTTP client: such a model keeps the SDK's client, and its calls go through the proxy."""
    seen: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"

    def forward() -> None:  # a plain HTTP proxy for one request: note its request line, relay it
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                request = conn.recv(65536)
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                while len(body) < length:
                    body += conn.recv(65536)
                seen.append(head.split(b"\r\n", 1)[0])
                lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
                host, port = fake_openai[0].removeprefix("http://").split("/")[0].split(":")
                with socket.create_connection((host, int(port))) as upstream:
                    upstream.sendall(b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body)
                    while data := upstream.recv(65536):
                        conn.sendall(data)

    threading.Thread(target=forward, daemon=True).start()
    params: dict[str, object] = {"max_retries": 0, "timeout": 5}
    if where == "params":
        params["openai_proxy"] = proxy
    else:
        monkeypatch.setenv("OPENAI_PROXY", proxy)
    model = build_model(
        ModelConfig(provider="openai", name="fake-model", base_url=fake_openai[0], params=params), agent="a", environ={}
    )

    async def ask() -> str:
        async with loop_clients():
            return str((await model.ainvoke("hi")).content).strip()

    with listener:
        assert asyncio.run(ask()) == REPLY
    assert seen == [f"POST {fake_openai[0]}/chat/completions HTTP/1.1".encode()]


def _openai_model(url: str) -> BaseChatModel:
    config = ModelConfig(provider="openai", name="fake-model", base_url=url, params={"max_retries": 0, "timeout": 5})
    return build_model(config, agent="remote", environ={})


def test_one_compiled_model_answers_on_each_event_loop(fake_openai: tuple[str, list[dict[str, object]]]) -> None:
    """The model's HTTP client is aiohttp, whose sessions belong to one event loop: a model compiled
    once answers on every loop that uses it (each test, each ``asyncio.run``), and each loop's
    client is closed with it."""
    url, requests = fake_openai
    model = _openai_model(url)

    async def ask(text: str) -> str:
        async with loop_clients():
            return str((await model.ainvoke(text)).content).strip()

    assert [asyncio.run(ask("one")), asyncio.run(ask("two"))] == [REPLY, REPLY]
    assert [sent["messages"][-1]["content"] for sent in requests] == ["one", "two"]


def test_a_runtime_closing_leaves_the_calls_of_another_on_the_same_loop_going() -> None:
    """Every model of a loop shares its HTTP client: one runtime (or judge) ending while another's
    call is in flight must not close the client under that call."""

    async def both(model: BaseChatModel) -> tuple[str, str]:
        async def asks(text: str) -> str:
            async with loop_clients():
                return str((await model.ainvoke(text)).content).strip()

        slow = asyncio.create_task(asks("slow"))  # the first request: its answer starts after 1 s
        await asyncio.sleep(0.3)
        quick = await asks("quick")  # its scope ends while the slow call is in flight
        return await slow, quick

    with FakeOpenAI(stalls=[1.0]) as server:
        slow, quick = asyncio.run(both(_openai_model(server.url)))
    assert (slow, quick) == ("The tool said: you said slow", "The tool said: you said quick")


def test_unreachable_model_server_is_one_clear_error(make_project: ProjectFactory) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    root = _project(make_project, url)
    started = time.monotonic()
    result = run_ca("run", "remote", "hi", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-test"})
    assert time.monotonic() - started < 30
    assert result.returncode == 1
    assert f"model call failed for agent 'remote' (openai:fake-model at {url}): " in result.stderr
    assert "ConnectionError: Connection error. ([Errno 111] Connect call failed" in result.stderr  # refused, said so
    assert "Traceback" not in result.stderr
    assert "sk-test" not in result.stderr


def test_a_model_with_tcp_options_of_its_own_keeps_langchains_client() -> None:
    """``http_socket_options`` in params are applied by langchain-openai's own transports, which
    the aiohttp one is not: such a model keeps them (the SDK's default client)."""
    config = ModelConfig(
        provider="openai", name="m", base_url="http://127.0.0.1:9/v1", params={"http_socket_options": [[1, 9, 1]]}
    )
    model = build_model(config, agent="a", environ={})
    assert type(model.http_async_client).__name__ != "LoopClient"  # type: ignore[attr-defined]
    assert model.http_socket_options == [(1, 9, 1)]  # type: ignore[attr-defined]


def test_a_scope_canceled_while_its_clients_close_closes_every_one() -> None:
    """The last scope of a loop takes its clients out and closes them: canceled meanwhile (a server
    stopping), it still closes all of them, since nothing else would."""
    import framework.compiler.model_http as model_http

    class Slow:
        def __init__(self) -> None:
            self.closed = False

        async def aclose(self) -> None:
            await asyncio.sleep(0.2)
            self.closed = True

    clients = [Slow(), Slow()]

    async def main() -> None:
        async def scope() -> None:
            async with loop_clients():
                loop = asyncio.get_running_loop()
                model_http._BY_LOOP[loop] = {("http", "a", None): clients[0], ("http", "b", None): clients[1]}

        closing = asyncio.create_task(scope())
        await asyncio.sleep(0.05)  # the scope has ended and is closing its clients
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing

    asyncio.run(main())
    assert [client.closed for client in clients] == [True, True]


def test_a_conversation_reaches_the_provider_as_the_sdks_own_walk_would_send_it() -> None:
    """The messages and tools of a chat completion skip the OpenAI SDK's walk of the parameters (see
    ``framework.compiler.model_http``): the JSON body on the wire is the one the SDK sends after its walk,
    sync and async, with tool calls, a tool's answer, an image and the user's own ``extra_body``
    (which still wins over what is moved), and the walk is given no message to walk."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from openai.resources.chat.completions import completions as sdk

    conversation = [
        SystemMessage("Be brief."),
        HumanMessage("read the notes"),
        AIMessage("", tool_calls=[{"name": "fs_read", "args": {"path": "notes.txt"}, "id": "call_1"}]),
        ToolMessage("remember the milk ü", tool_call_id="call_1"),
        HumanMessage(
            [
                {"type": "text", "text": "and this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
            ]
        ),
    ]
    tool = {
        "type": "function",
        "function": {
            "name": "fs_read",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    walked: list[object] = []
    walk = sdk.async_maybe_transform

    async def recording(data: dict[str, object], expected_type: object) -> object:
        walked.append(data["messages"])
        return await walk(data, expected_type)

    with FakeOpenAI() as server, pytest.MonkeyPatch.context() as patch:
        patch.setattr(sdk, "async_maybe_transform", recording)
        params = {"max_retries": 0, "timeout": 5, "extra_body": {"top_k": 2}}
        config = ModelConfig(provider="openai", name="fake-model", base_url=server.url, params=params)
        model = build_model(config, agent="a", environ={})
        walking = model.model_copy(update={"async_client": model.async_client._resource})  # type: ignore[attr-defined]

        async def ask(chat: BaseChatModel) -> BaseMessage:
            async with loop_clients():
                return await chat.bind_tools([tool]).ainvoke(conversation)

        answers = [asyncio.run(ask(model)), asyncio.run(ask(walking)), model.bind_tools([tool]).invoke(conversation)]
    moved, walked_through, sync = server.requests
    assert moved == walked_through == sync
    assert [message["role"] for message in moved["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert moved["messages"][3]["content"] == "remember the milk ü"
    assert moved["tools"] == [tool]
    assert moved["top_k"] == 2
    assert len(walked) == 2  # the async calls; the sync one walks through maybe_transform
    assert walked[0] == []  # the moved messages never reach the walk
    assert len(walked[1]) == 5  # the SDK's own path walks all of them
    # The streamed answer read from the chunks as they came is the one read from the SDK's chunk models.
    assert all(isinstance(answer, AIMessage) for answer in answers)
    read = [(a.content, a.tool_calls, a.usage_metadata, a.response_metadata) for a in answers]  # type: ignore[attr-defined]
    assert read[0] == read[1] == read[2]
    assert answers[0].tool_calls[0]["name"] == "fs_read"  # type: ignore[attr-defined]
    assert answers[0].usage_metadata["total_tokens"] == 49  # type: ignore[attr-defined]


def test_the_wrapped_chat_resource_moves_only_what_it_may_and_copies_as_the_sdks_does() -> None:
    """What the wrapper hands over: ``messages`` and ``tools`` when they are lists, the placeholder
    only in place of moved messages, the caller's ``extra_body`` on top; and a shallow copy of it
    (as ``copy.copy`` of a model's client makes) is a working wrapper, not an endless lookup."""
    import copy

    from framework.compiler.model_http import _as_built

    said = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "t"}}]
    assert _as_built({"model": "m", "messages": said, "tools": tools, "extra_body": {"tools": [], "k": 1}}) == {
        "model": "m",
        "messages": [],
        "extra_body": {"messages": said, "tools": [], "k": 1},
    }
    iterable = iter(said)  # not a list: left to the SDK, which walks it into one
    assert _as_built({"model": "m", "messages": iterable, "tools": tools}) == {
        "model": "m",
        "messages": iterable,
        "extra_body": {"tools": tools},
    }
    assert _as_built({"model": "m", "messages": iterable}) == {"model": "m", "messages": iterable}

    config = ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:9/v1", params={"max_retries": 0})
    model = build_model(config, agent="a", environ={})
    copied = copy.copy(model.async_client)  # type: ignore[attr-defined]
    assert copied.create.__func__ is model.async_client.create.__func__  # type: ignore[attr-defined]
    assert copied.with_streaming_response is not None  # the SDK resource's own attributes, through the copy


def _streamed(*chunks: dict[str, object]) -> bytes:
    return "".join([*(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks), "data: [DONE]\n\n"]).encode()


def _answering(body: bytes, provider: str = "openai", **more: object) -> BaseChatModel:
    """A model as ca builds it whose HTTP client answers every call with ``body`` (in process, the
    SDK's httpx): a stream, or a JSON completion when ``body`` is one; ``more``: its params."""
    httpx = sdk_httpx()
    kind = "application/json" if body.startswith(b"{") else "text/event-stream"

    def answer(request: object) -> object:
        return httpx.Response(200, content=body, headers={"content-type": kind, "x-request-id": "req_1"})

    params: dict[str, object] = {"http_async_client": httpx.AsyncClient(transport=httpx.MockTransport(answer))}
    params |= {"max_retries": 0, **more}
    if provider == "azure_openai":
        params |= {"api_version": "2024-10-21", "azure_endpoint": "http://127.0.0.1:9"}
        config = ModelConfig(provider=provider, name="m", params=params)
        return build_model(config, agent="a", environ={"AZURE_OPENAI_API_KEY": "k"})
    config = ModelConfig(provider=provider, name="m", base_url="http://127.0.0.1:9/v1", params=params)
    return build_model(config, agent="a", environ={})


def test_answers_of_servers_that_leave_fields_out_are_read_as_the_sdk_reads_them() -> None:
    """Servers other than OpenAI's leave out fields of a streamed chunk that the SDK's chunk model
    fills in with None and langchain-openai reads: Azure's asynchronous content filter ends with a
    choice without ``delta``; Gemini's OpenAI endpoint sends a tool call without ``index``. Both
    answers are read whole (an earlier version handed langchain-openai the raw chunks: the first
    failed with KeyError, the second lost its tool call and the run ended 'completed')."""
    safe = {"hate": {"filtered": False, "severity": "safe"}}
    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    azure = _streamed(
        {"id": "", "object": "", "created": 0, "model": "", "choices": [], "prompt_filter_results": []},
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [{"index": 0, "finish_reason": None, "content_filter_results": safe}]},
    )
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path":"a.md"}'}}
    gemini = _streamed(
        {"object": "chat.completion.chunk", "model": "g", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        {
            "object": "chat.completion.chunk",
            "model": "g",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        },
    )
    tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}

    async def ask(model: BaseChatModel, tools: list[dict[str, object]]) -> BaseMessage:
        from langchain_core.messages import BaseMessage

        answer = await (model.bind_tools(tools) if tools else model).ainvoke("hi")
        assert isinstance(answer, BaseMessage)
        return answer

    filtered = asyncio.run(ask(_answering(azure, "azure_openai"), []))
    assert (filtered.content, filtered.response_metadata["finish_reason"]) == ("Hello", "stop")
    called = asyncio.run(ask(_answering(gemini), [tool]))
    assert [(c["name"], c["args"], c["id"]) for c in called.tool_calls] == [("read", {"path": "a.md"}, "call_1")]  # type: ignore[attr-defined]


def _sdk_own(model: BaseChatModel) -> BaseChatModel:
    """``model`` with the OpenAI SDK's own chat completions resources (what ca wraps)."""
    own = {name: getattr(model, name)._resource for name in ("client", "async_client")}
    return model.model_copy(update=own)


def _read(answer: BaseMessage) -> tuple[object, ...]:
    metadata = {k: v for k, v in answer.response_metadata.items() if k != "headers"}
    return answer.content, answer.tool_calls, answer.usage_metadata, metadata  # type: ignore[attr-defined]


def test_an_answer_not_streamed_is_validated_and_read_as_the_sdk_reads_it() -> None:
    """With ``streaming: false`` the completion is validated into the SDK's model rather than built
    field by field (the SDK's ``construct``, ~15 times slower): the answer read is the SDK path's,
    also for a completion that fails validation (a server's own ``finish_reason``), which is built
    the SDK's way. The response's headers still reach the answer where a model asks for them."""
    from openai.types.chat import ChatCompletion

    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path":"a.md"}'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    head = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": usage}
    valid = {**head, "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    said = {"role": "assistant", "content": "Hello"}
    own_reason = {**head, "choices": [{"index": 0, "message": said, "finish_reason": "eos"}]}
    tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}

    def ask(model: BaseChatModel) -> BaseMessage:
        from langchain_core.messages import BaseMessage

        answer = asyncio.run(model.bind_tools([tool]).ainvoke("hi"))
        assert isinstance(answer, BaseMessage)
        return answer

    built: list[object] = []
    construct = ChatCompletion.construct

    def counted(**values: object) -> object:
        built.append(values)
        return construct(**values)

    for body in (valid, own_reason):
        for headers in (False, True):
            params = {"streaming": False, "include_response_headers": headers}
            model = _answering(json.dumps(body).encode(), **params)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(ChatCompletion, "construct", counted)
                ours = ask(model)
                built_by_us, built[:] = len(built), []
                theirs = ask(_sdk_own(model))
            assert _read(ours) == _read(theirs)
            assert ("headers" in ours.response_metadata) is headers
            if headers:
                assert ours.response_metadata["headers"]["x-request-id"] == "req_1"
            assert built_by_us == (0 if body is valid else 1)  # the SDK's own path builds every one
            assert len(built) == 1
            built.clear()
    assert [
        (c["name"], c["args"]) for c in ask(_answering(json.dumps(valid).encode(), streaming=False)).tool_calls
    ] == [  # type: ignore[attr-defined]
        ("read", {"path": "a.md"})
    ]


def test_a_streamed_answer_with_its_headers_has_its_chunks_validated() -> None:
    """A model that asks for the response's headers (``include_response_headers``) reads a stream
    through the raw response: its chunks are validated too, and the answer is the SDK path's."""
    from openai.types.chat import ChatCompletionChunk

    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body = _streamed(
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
    )
    built: list[object] = []
    construct = ChatCompletionChunk.construct

    def counted(**values: object) -> object:
        built.append(values)
        return construct(**values)

    model = _answering(body, include_response_headers=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ChatCompletionChunk, "construct", counted)
        ours = asyncio.run(model.ainvoke("hi"))
        assert built == []
        theirs = asyncio.run(_sdk_own(model).ainvoke("hi"))
        assert len(built) == 2
    assert _read(ours) == _read(theirs)
    assert ours.content == "Hello"
    assert ours.response_metadata["headers"]["x-request-id"] == "req_1"


def test_a_cookie_the_provider_sets_is_never_sent_back(provider: Starlette) -> None:
    """The models that call one server share its HTTP client, whatever their API keys (two agents, two
    callers' runs, two versions of a project): a cookie the server set for one key's request (a
    gateway's session) must not ride on another key's requests."""
    url = f"http://localhost:{provider.state.port}/v1"  # a host name: cookies of an IP address are not kept anyway

    def model(key: str) -> BaseChatModel:
        config = ModelConfig(
            provider="openai", name="fake-model", base_url=url, api_key_env="KEY", params={"max_retries": 0}
        )
        return build_model(config, agent="remote", environ={"KEY": key})

    async def ask() -> None:
        first, second = model("key-a"), model("key-b")
        async with loop_clients():
            for each in (first, second, first):
                await each.ainvoke("hi")

    asyncio.run(ask())
    assert provider.state.seen == [("Bearer key-a", None), ("Bearer key-b", None), ("Bearer key-a", None)]
