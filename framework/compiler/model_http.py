"""The HTTP client of models on the OpenAI SDK (``openai``, ``azure_openai``): aiohttp, per event loop and server.

The SDK's default transport is httpx's connection pool, which looks at every connection it holds
on each request and each response it closes: with many model calls in flight most of a call's CPU
went there (``bench/slow_model.py``, 1000 calls in flight: 6.2 ms of ``ca serve``'s CPU per task
with it, 4.6–4.8 ms over aiohttp). The SDK ships an aiohttp transport of its own (the
``openai[aiohttp]`` extra, ``openai.DefaultAioHttpClient``), with the SDK's defaults (timeouts,
connection limits, redirects, HTTP proxies from the environment); ``cleveragents[openai]`` installs it.

An aiohttp session belongs to the event loop it was opened on, and a compiled model outlives
loops (a test, ``ca eval``, each ``asyncio.run``). So a model is given a client of the SDK's
(:func:`openai_arguments`) whose requests go through an aiohttp client of the running loop, one per
server (scheme, host, port): the models that call one server share its pool, as they shared the
client langchain-openai caches, and a server that is slow cannot take the connections another
needs. Code that runs models holds :func:`loop_clients` meanwhile (a runtime, from its opening
to its close; ``ca test``'s judge); the loop's clients are closed when the last holder lets go,
never under another one's call in flight. A call outside any such scope (a model used from
other code) goes through the SDK's default httpx client, made on first use, as without this module.

A model keeps the SDK's default client as before where the transport cannot do what the user
asked: without aiohttp, with an ``openai_proxy`` (params or ``OPENAI_PROXY``) or
``http_socket_options`` in params (langchain-openai applies both itself), or with a SOCKS proxy
in the environment (aiohttp speaks only HTTP to a proxy).

The SDK also walks every request's parameters against their declared types before it sends them
(``async_maybe_transform``: a recursive, awaited walk through the unions of message and tool
types, at every level), to rename aliased keys and format dates and files. For a chat
completion's ``messages`` and ``tools`` it changes nothing — their types declare no alias and
no format, and langchain-openai builds them as plain JSON — yet it was ``ca serve``'s largest
single cost with a model of this SDK (``bench/slow_model.py``: about a tenth of the server's CPU
for a two-message conversation), growing with every message of the conversation. A model's chat
completions resource is therefore wrapped (:func:`without_transform`) to hand both to the SDK in
``extra_body``, which it merges into the JSON body after that walk: the same JSON on the wire,
``tools`` perhaps later among its keys (``tests/cli/test_run_provider.py`` compares them), what
``extra_body`` the user's params set still winning.

On the way back the SDK builds a model of every chunk of a streamed answer — by another walk of
the kind, without validating (~65 µs a chunk here, for every token of every answer) — which
langchain-openai dumps back to a dict at once; and of an answer not streamed (``streaming:
false``), ~110 µs a completion. A wrapped resource asks for its answer through the SDK's public
raw-response API and has it parsed into :func:`_validated` types, which validate each chunk or
completion into the same model instead (pydantic's compiled validator, ~5 µs), and build it the
SDK's way when that fails: a chunk that leaves out a field the model requires (Azure's
content-filter chunks have no ``delta``, Gemini's OpenAI endpoint sends tool calls without
``index``) is the model it always was, with None where the field is missing, which
langchain-openai reads. (The plain dicts, tried first, broke exactly those two: langchain-openai
reads such keys by index.) A chunk or completion that validates is the model the SDK would have
built (the SDK validates every optional field itself), but for ``created`` and a choice's
``index`` sent as text, a float or a boolean, which become integers (langchain-openai reads
neither), and a key named like the SDK's ``construct`` arguments (``_fields_set``), which fails
the SDK's way and is kept as an extra here.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib.util
import logging
import sys
import urllib.request
import weakref
from collections.abc import AsyncIterator
from http.cookiejar import CookieJar, DefaultCookiePolicy
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

logger = logging.getLogger(__name__)

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, int | None], Any]] = (
    weakref.WeakKeyDictionary()
)
"""The running loop -> its aiohttp-backed clients of the OpenAI SDK, by server."""
_HOLDERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()
"""The running loop -> how many :func:`loop_clients` scopes are open on it."""


def openai_arguments(model: BaseChatModel) -> dict[str, Any]:
    """What to build langchain-openai's ``model`` with again, so that it calls over aiohttp; empty
    when it keeps the SDK's default client (see the module doc).

    Given a client, langchain-openai no longer decides ``stream_usage`` itself (it asks OpenAI for
    the usage of a streamed answer only with its own client): its decision for ``model`` is kept."""
    if getattr(model, "openai_proxy", None) or getattr(model, "http_socket_options", None) or _socks_proxy():
        return {}  # asked of langchain-openai's own transports (a proxy, TCP options): they stay
    client_class = _loop_client_class()
    if client_class is None:
        return {}
    arguments: dict[str, Any] = {"http_async_client": client_class(), "stream_usage": model.stream_usage}  # type: ignore[attr-defined]
    if "http_socket_options" in type(model).model_fields:
        # langchain-openai's TCP options are for transports of its own; with the async client given they
        # would reach only its sync client, where a custom transport turns off httpx's proxies from the
        # environment (and it warns so): that client stays the SDK's default.
        arguments["http_socket_options"] = ()
    return arguments


def _socks_proxy() -> bool:
    """Whether a proxy variable httpx reads (``HTTP(S)_PROXY``, ``ALL_PROXY``) names a SOCKS proxy,
    which httpx speaks."""
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme, "").lower().startswith("socks") for scheme in ("http", "https", "all"))


def sdk_httpx() -> ModuleType:
    """The httpx the OpenAI SDK is built on (it ships a copy of its own under another name): its
    clients, transports and errors are the ones the SDK takes and raises."""
    import openai

    return sys.modules[openai.DefaultAsyncHttpxClient.__mro__[1].__module__.partition(".")[0]]


@functools.cache
def _loop_client_class() -> type[Any] | None:
    """A subclass of the SDK's httpx client (the SDK accepts nothing else) that sends through the
    running loop's aiohttp client of the request's server; requests are built as the SDK builds
    them. None without the SDK's aiohttp transport."""
    if importlib.util.find_spec("aiohttp") is None or importlib.util.find_spec("openai") is None:
        return None
    import openai

    found = getattr(openai, "DefaultAioHttpClient", None)
    if found is None:  # an SDK from before its aiohttp transport
        return None
    aiohttp_client: type[Any] = found
    try:
        aiohttp_client()  # opens nothing yet: the session is opened by the first request
    except RuntimeError:  # the SDK's own word that its aiohttp extra is not installed
        return None

    import aiohttp

    httpx = sdk_httpx()

    class Cookieless(aiohttp_client):  # type: ignore[misc]
        """The SDK's aiohttp client, keeping no cookies: the models of every key, caller and version
        of the project share it, so a cookie one call was given would ride on the others' calls.
        Both of its jars refuse them: httpx's (redirects) and each aiohttp session's (every request)."""

        def __init__(self) -> None:
            super().__init__(cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))

        def _init_transport(self, *args: Any, **kwargs: Any) -> Any:
            return _without_cookies(super()._init_transport(*args, **kwargs))

        def _init_proxy_transport(self, *args: Any, **kwargs: Any) -> Any:  # a proxy of the environment's
            return _without_cookies(super()._init_proxy_transport(*args, **kwargs))

    def _without_cookies(transport: Any) -> Any:
        """``transport`` (the SDK's aiohttp transport, its session not opened yet) opening the session
        it would open, with a jar that keeps nothing."""
        if getattr(transport, "client", False) is not None:  # not that transport, or given a session
            return transport
        default = copy.copy(transport)

        def session() -> aiohttp.ClientSession:
            made = default.get_client()
            connector = made.connector
            made.detach()  # the same connector, in a session that keeps no cookies
            return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

        transport.client = session
        return transport

    def retyped(exc: Exception, request: Any) -> Exception:
        """The transport calls every broken connection a ConnectTimeout, and lets a malformed answer
        through as aiohttp's own error: each is typed as the SDK's default client types it, so the
        user is told the server cannot be reached (refused, unknown host), dropped the connection or
        answered no HTTP, not that it is slow, and the SDK retries it as it would."""
        cause = exc if isinstance(exc, aiohttp.ClientResponseError) else exc.__cause__
        if cause is None or isinstance(cause, TimeoutError):  # a timeout indeed
            return exc
        error: Exception
        if isinstance(cause, aiohttp.ClientConnectorError):
            error = httpx.ConnectError(str(cause), request=request)
        elif isinstance(cause, aiohttp.ClientResponseError):
            error = httpx.RemoteProtocolError(cause.message or str(cause), request=request)
        else:
            error = httpx.ReadError(str(cause) or type(cause).__name__, request=request)
        return error

    class Unused(httpx.AsyncBaseTransport):  # type: ignore[misc, name-defined]
        """The transport of the SDK's client itself, which sends nothing (``send`` is the loop's):
        given, the client builds no connection pool and loads no certificates of its own."""

        async def handle_async_request(self, request: Any) -> Any:
            raise RuntimeError("requests of this client are sent by its loop's aiohttp client")

    class LoopClient(openai.DefaultAsyncHttpxClient):
        def __init__(self) -> None:
            super().__init__(transport=Unused(), trust_env=False)
            self.outside: Any = None
            """The SDK's default client, for calls outside any :func:`loop_clients` scope."""

        async def send(self, request: Any, **kwargs: Any) -> Any:
            if self.is_closed:
                raise RuntimeError("Cannot send a request, as the client has been closed.")
            loop = asyncio.get_running_loop()
            if not _HOLDERS.get(loop):
                if self.outside is None:
                    self.outside = openai.DefaultAsyncHttpxClient()
                return await self.outside.send(request, **kwargs)
            clients = _BY_LOOP.setdefault(loop, {})
            server = (request.url.scheme, request.url.host, request.url.port)
            client = clients.get(server)
            if client is None or client.is_closed:
                client = clients[server] = Cookieless()
            try:
                return await client.send(request, **kwargs)
            except (httpx.ConnectTimeout, aiohttp.ClientResponseError) as exc:
                # (A body cut off later is the transport's ReadError already.)
                raise retyped(exc, request) from (exc.__cause__ or exc)

        async def aclose(self) -> None:
            if self.outside is not None:
                await self.outside.aclose()
            await super().aclose()

    return LoopClient


@contextlib.asynccontextmanager
async def loop_clients() -> AsyncIterator[None]:
    """While models run on this loop: their calls go over aiohttp, whose clients are closed when the
    last of these scopes on the loop ends (a later scope opens others)."""
    loop = asyncio.get_running_loop()
    _HOLDERS[loop] = _HOLDERS.get(loop, 0) + 1
    try:
        yield
    finally:
        _HOLDERS[loop] -= 1
        if not _HOLDERS[loop]:
            del _HOLDERS[loop]
            await _close(list(_BY_LOOP.pop(loop, {}).values()))


async def _close(clients: list[Any]) -> None:
    """Close every one of ``clients``, even when the scope is canceled meanwhile (a server stopping)
    or one of them fails to close: no longer in :data:`_BY_LOOP`, nothing else would close the rest."""
    closing = asyncio.gather(*(client.aclose() for client in clients), return_exceptions=True)
    try:
        closed = await asyncio.shield(closing)
    except asyncio.CancelledError:
        await closing
        raise
    for outcome in closed:
        if isinstance(outcome, Exception):
            logger.warning("a model's HTTP client did not close cleanly: %s", outcome)


_AS_BUILT = ("messages", "tools")
"""The parameters of a chat completion passed on as langchain-openai built them (see the module doc)."""


def without_transform(model: BaseChatModel) -> BaseChatModel:
    """``model`` (langchain-openai's, on the OpenAI SDK) with its chat completions resources, sync
    and async, handing ``messages`` and ``tools`` to the SDK past its parameter walk and validating
    the answer (a completion, or a stream's chunks) instead of walking it (see the module doc); any
    other model as it is."""
    fields = type(model).model_fields
    if "client" not in fields or "async_client" not in fields:
        return model
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    chunk, completion = _validated(ChatCompletionChunk), _validated(ChatCompletion)
    wrappers = {
        "client": (_AsBuilt, _Raw, openai.Stream[chunk]),  # type: ignore[valid-type]
        "async_client": (_AsyncAsBuilt, _AsyncRaw, openai.AsyncStream[chunk]),  # type: ignore[valid-type]
    }
    update = {
        name: wrapper(resource, raw(resource.with_raw_response, stream, completion))
        for name, (wrapper, raw, stream) in wrappers.items()
        if (resource := getattr(model, name))
    }
    return model.model_copy(update=update) if update else model


@functools.cache
def _validated(model: type[Any]) -> type[Any]:
    """``model`` (the SDK's completion or chunk model), built from an answer's decoded JSON by
    validating it, or as the SDK builds it (its ``construct``) where validation fails. The SDK asks
    a type with a ``build`` class method to build what it parses (its model-builder protocol); a
    version that no longer did would construct this subclass of its own model, as slowly as before."""
    import pydantic

    class Validated(model):  # type: ignore[misc]
        @classmethod
        def build(cls, *, response: Any, data: object) -> Any:
            if isinstance(data, dict):
                try:
                    return model.model_validate(data)
                except pydantic.ValidationError:  # a field left out or of another type: the SDK's own way
                    return model.construct(**data)
            if isinstance(data, list):
                return [model.construct(**item) if isinstance(item, dict) else item for item in data]
            return data

    Validated.__name__ = Validated.__qualname__ = f"Validated{model.__name__}"
    return Validated


class _Moved:
    """A chat completions resource of the OpenAI SDK (or its ``with_raw_response``): all but what a
    subclass defines (its ``create``) is the resource's own."""

    __slots__ = ("_resource",)

    def __init__(self, resource: Any) -> None:
        self._resource = resource

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _Moved.__slots__:  # a copy being made asks before it has a resource
            raise AttributeError(name)
        return getattr(self._resource, name)


class _Raw(_Moved):
    """The resource's ``with_raw_response`` (the SDK's public raw-response API): ``create`` moves
    the parameters, and what it answers parses into :func:`_validated` types unless told another
    type: a completion, or a stream (``stream=True``) of validated chunks. Requests through it carry
    the header that API adds (``X-Stainless-Raw-Response``)."""

    __slots__ = ("_completion", "_stream")

    def __init__(self, resource: Any, stream: type[Any], completion: type[Any]) -> None:
        super().__init__(resource)
        self._stream = stream
        self._completion = completion

    def create(self, **params: Any) -> Any:
        return _Parsed(self._resource.create(**_as_built(params)), self._parsed_as(params))

    def _parsed_as(self, params: dict[str, Any]) -> type[Any]:
        return self._stream if params.get("stream") is True else self._completion


class _AsyncRaw(_Raw):
    """The async resource's ``with_raw_response``, as :class:`_Raw`."""

    async def create(self, **params: Any) -> Any:
        return _Parsed(await self._resource.create(**_as_built(params)), self._parsed_as(params))


class _Parsed:
    """The SDK's raw response to a :class:`_Raw` create, whose ``parse()`` builds the type chosen
    there; everything else (headers, the HTTP response, ``parse(to=...)``) is the response's own."""

    __slots__ = ("_as", "_response")

    def __init__(self, response: Any, parsed_as: type[Any]) -> None:
        self._response = response
        self._as = parsed_as

    def parse(self, *, to: type[Any] | None = None) -> Any:
        return self._response.parse(to=self._as if to is None else to)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _Parsed.__slots__:
            raise AttributeError(name)
        return getattr(self._response, name)


class _AsBuilt(_Moved):
    """The sync resource: ``create`` is its :class:`_Raw` ``create``, parsed."""

    __slots__ = ("_raw",)

    def __init__(self, resource: Any, raw: _Raw) -> None:
        super().__init__(resource)
        self._raw = raw

    def create(self, **params: Any) -> Any:
        return self._raw.create(**params).parse()

    @property
    def with_raw_response(self) -> _Raw:
        return self._raw


class _AsyncAsBuilt(_AsBuilt):
    """The async resource, as :class:`_AsBuilt`."""

    async def create(self, **params: Any) -> Any:
        return (await self._raw.create(**params)).parse()


def _as_built(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` of ``create`` with the lists of :data:`_AS_BUILT` moved into ``extra_body``, under
    what the caller's own ``extra_body`` says (it wins, as it would over the parameters); an empty
    ``messages`` stays in place of a moved one, as ``create`` requires one, and the body's is the
    moved one. The JSON body is the same, but for where in it a moved ``tools`` comes."""
    moved = {name: list(params[name]) for name in _AS_BUILT if isinstance(params.get(name), list | tuple)}
    if not moved:
        return params
    rest = {name: value for name, value in params.items() if name not in moved}
    if "messages" in moved:
        rest["messages"] = []
    rest["extra_body"] = {**moved, **(params.get("extra_body") or {})}
    return rest
