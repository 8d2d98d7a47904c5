"""The HTTP client of models on the OpenAI SDK (``openai``, ``azure_openai``): aiohttp, one per event loop.

The SDK's default transport is httpx's connection pool, which looks at every connection it holds
on each request and each response it closes: with many model calls in flight most of a call's CPU
went there (``bench/slow_model.py``, 1000 calls in flight: 6.2 ms of ``ca serve``'s CPU per task
with it, 4.6–4.8 ms over aiohttp). The SDK ships an aiohttp transport of its own (the
``openai[aiohttp]`` extra, ``openai.DefaultAioHttpClient``), with the SDK's defaults (timeouts,
connection limits, redirects, proxies from the environment); ``cleveragents[openai]`` installs it.

An aiohttp session belongs to the event loop it was opened on, and a compiled model outlives
loops (a test, ``ca eval``, each ``asyncio.run``). So a model is given :func:`openai_arguments`'s
client: an httpx client of the SDK's whose requests go through the running loop's aiohttp client,
opened on first use and shared by every model of that loop (the pool is per host, as the SDK's
own). Code that runs models holds :func:`loop_clients` meanwhile (a runtime, from its opening to
its close; ``ca test``'s judge): the loop's client is closed when the last holder lets go, never
under another one's call in flight. Without aiohttp (or with an SDK that has no such transport)
models keep the SDK's default client.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import sys
import weakref
from collections.abc import AsyncIterator
from typing import Any

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
"""The running loop -> its aiohttp-backed client of the OpenAI SDK."""
_HOLDERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()
"""The running loop -> how many :func:`loop_clients` scopes are open on it."""


def openai_arguments() -> dict[str, Any]:
    """What langchain-openai's chat models are given: the ``http_async_client`` (none when the
    SDK's aiohttp transport is not installed: the SDK's default httpx client is used)."""
    client_class = _loop_client_class()
    if client_class is None or importlib.util.find_spec("langchain_openai") is None:
        return {}  # without the integration, building the model says which package to install
    from langchain_openai.chat_models.base import BaseChatOpenAI

    arguments: dict[str, Any] = {"http_async_client": client_class()}
    if "http_socket_options" in BaseChatOpenAI.model_fields:
        # langchain-openai's TCP options are for transports of its own; with the async client given they
        # would reach only its sync client, where a custom transport turns off httpx's proxies from the
        # environment (and it warns so): that client stays the SDK's default, as without this module.
        arguments["http_socket_options"] = ()
    return arguments


@functools.cache
def _loop_client_class() -> type[Any] | None:
    """A subclass of the SDK's httpx client (the SDK accepts nothing else) that sends through the
    running loop's aiohttp client; requests are built as the SDK builds them. None without the
    SDK's aiohttp transport."""
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

    httpx = sys.modules[openai.DefaultAsyncHttpxClient.__bases__[0].__module__.partition(".")[0]]  # the SDK's

    def retyped(exc: Exception, request: Any) -> Exception:
        """The transport calls every broken connection a ConnectTimeout; one that did not time out is
        an error of its own, as the SDK's default client types it: the user is told the server cannot
        be reached (refused, unknown host) or dropped the connection, not that it is slow."""
        cause = exc.__cause__
        if cause is None or isinstance(cause, TimeoutError):  # a timeout indeed
            return exc
        error: Exception
        if isinstance(cause, aiohttp.ClientConnectorError):
            error = httpx.ConnectError(str(cause), request=request)
        else:
            error = httpx.ReadError(str(cause) or type(cause).__name__, request=request)
        return error

    class LoopClient(openai.DefaultAsyncHttpxClient):
        async def send(self, request: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            client = _BY_LOOP.get(loop)
            if client is None or client.is_closed:
                client = _BY_LOOP[loop] = aiohttp_client()
            try:
                return await client.send(request, **kwargs)
            except httpx.ConnectTimeout as exc:  # a body cut off later is the transport's ReadError already
                raise retyped(exc, request) from exc.__cause__

    return LoopClient


@contextlib.asynccontextmanager
async def loop_clients() -> AsyncIterator[None]:
    """While models run on this loop: when the last of these scopes ends, the loop's aiohttp client
    (if a model opened one) is closed; a later call opens another."""
    loop = asyncio.get_running_loop()
    _HOLDERS[loop] = _HOLDERS.get(loop, 0) + 1
    try:
        yield
    finally:
        _HOLDERS[loop] -= 1
        if not _HOLDERS[loop]:
            del _HOLDERS[loop]
            client = _BY_LOOP.pop(loop, None)
            if client is not None:
                await client.aclose()
