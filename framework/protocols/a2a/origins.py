"""Where a call to a remote agent may send requests, and which credentials go with them.

An origin is a URL's scheme, host and port, normalised: the host lowercased, IDNA-encoded and
without a trailing dot, the port explicit (80 for http, 443 for https), so
``HTTP://Agents.Example.com./x`` and ``http://agents.example.com:80/`` are one origin.

* **A remote call is pinned to the origin of its URL** — the URL ``capabilities.network.allow``
  admitted, or the one given to ``ca call``. Every request of the call goes through
  :func:`pinned_client`'s check before it is sent (httpx runs it for every redirect hop too):
  a request to another origin is refused with :class:`OriginRefused`. So a redirect to another
  origin is not followed (one within the origin is), and of a card's interfaces only those on
  the origin are used (:func:`pinned_card`); a card naming none there is refused.
* **Credentials belong to an origin.** The headers of ``ca.yaml`` ``registries[].headers_env``
  go with requests to exactly the registry's origin (:func:`credentials_for`), added by the same
  check, never as a client's default headers: a URL that merely starts like the registry's
  (``http://localhost:18083.attacker.example/``, ``http://localhost:180839/``) gets nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING, NamedTuple

import httpx
from langchain_core.tools import ToolException

from framework.runtime import telemetry
from framework.spec.project import Registry

if TYPE_CHECKING:
    from a2a.types import AgentCard

DEFAULT_PORTS = {"http": 80, "https": 443}
TRUST = "use a URL on it as the agent's URL (an agent tool also needs its host in capabilities.network.allow)"


class OriginRefused(ToolException):
    """A remote call would send a request to another origin than its URL's; nothing was sent there."""


class Origin(NamedTuple):
    """A normalised origin: ``scheme`` http or https, ``host`` in ASCII, ``port`` explicit."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str | httpx.URL) -> Origin:
    """The origin of an http(s) URL; :class:`OriginRefused` for anything without one."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise OriginRefused(f"{str(url)!r} is not a URL: {exc}") from exc
    host = parsed.raw_host.decode("ascii").lower().removesuffix(".")
    if parsed.scheme not in DEFAULT_PORTS or not host:
        raise OriginRefused(f"{str(url)!r} is not an http:// or https:// URL with a host")
    return Origin(parsed.scheme, host, parsed.port or DEFAULT_PORTS[parsed.scheme])


def credentials_for(origin: Origin, registries: Sequence[Registry], environ: Mapping[str, str]) -> dict[str, str]:
    """The headers of every registry whose origin is exactly ``origin``; values from ``environ``.

    A variable that is unset or empty adds no header.
    """
    headers: dict[str, str] = {}
    for registry in registries:
        if origin_of(registry.url) == origin:  # ca.yaml's registry URLs are checked to have one
            headers.update({name: environ[var] for name, var in registry.headers_env.items() if environ.get(var)})
    return headers


Credentials = Callable[[], Mapping[str, str]]
"""The headers to add to a request, asked for each one (a reload may change registries or variables)."""


class _Pin:
    """httpx request hook: refuse a request off ``origin``, add ``credentials()`` to the others."""

    def __init__(self, origin: Origin, credentials: Credentials) -> None:
        self.origin = origin
        self.credentials = credentials

    async def __call__(self, request: httpx.Request) -> None:
        if not _on(request.url, self.origin):
            raise OriginRefused(
                f"refused a request to {str(request.url)!r}: a call to a remote agent stays on {self.origin}, "
                "the origin of its URL, and does not follow a redirect to another origin; if you trust that "
                "address, " + TRUST
            )
        request.headers.update(self.credentials())
        telemetry.inject(request.headers)  # one trace across the call, when tracing is on


def pinned_client(origin: Origin, credentials: Credentials, *, timeout: httpx.Timeout) -> httpx.AsyncClient:
    """An HTTP client whose every request (and redirect hop) must go to ``origin`` and carries ``credentials()``.

    A request hook rather than a transport, so the environment's proxy settings still apply.
    It keeps no cookies: the client serves every caller's calls to the origin (and every version
    of the project), so a cookie one call was given would ride on the next caller's requests.
    """
    pin = _Pin(origin, credentials)
    cookies = CookieJar(DefaultCookiePolicy(allowed_domains=[]))  # takes in no cookie, so sends none
    return httpx.AsyncClient(timeout=timeout, follow_redirects=True, event_hooks={"request": [pin]}, cookies=cookies)


def pinned_card(card: AgentCard, url: str) -> AgentCard:
    """``card`` (read at ``url``) with only its interfaces on ``url``'s origin, in their order.

    A card whose interfaces all lie elsewhere is refused with :class:`OriginRefused`; a card
    with none at all is returned as it is (the A2A client reports that it cannot use it).
    """
    from a2a.types import AgentCard

    origin = origin_of(url)
    interfaces = list(card.supported_interfaces)
    kept = [i for i in interfaces if _on(i.url, origin)]
    if interfaces and not kept:
        named = ", ".join(repr(i.url) for i in interfaces)
        where = f"interface at {named}, which is not" if len(interfaces) == 1 else f"interfaces at {named}, none"
        raise OriginRefused(
            f"the agent card at {url!r} names its {where} on {origin}: a remote agent "
            "is called only on the origin (scheme, host and port) of its URL, so nothing was sent there; "
            "if you trust that address, " + TRUST
        )
    pinned = AgentCard()
    pinned.CopyFrom(card)
    del pinned.supported_interfaces[:]
    pinned.supported_interfaces.extend(kept)
    return pinned


def _on(url: str | httpx.URL, origin: Origin) -> bool:
    try:
        return origin_of(url) == origin
    except OriginRefused:  # a URL without an origin (file://, garbage) is not on ours
        return False
