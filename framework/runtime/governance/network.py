"""Network capability: which hosts ``http.get`` and remote agents may reach.

URLs are parsed with ``httpx.URL``, the parser the ``http.get`` tool and the A2A client use,
so governance judges the host the request will really go to (``http://api.github.com@evil.com/``
goes to ``evil.com``; ``http://evil.com#@api.github.com`` too). Then:

* the scheme is ``http`` or ``https``;
* a URL with a user name or password (``user@host``) is refused outright;
* the host is compared in its ASCII form: lowercased, internationalised names IDNA-encoded
  (``bücher.example`` is ``xn--bcher-kva.example``, and a Cyrillic ``аpi.github.com`` is
  ``xn--pi-6kc.github.com``, so a look-alike never matches the real name), one trailing dot
  dropped; a host with characters no DNS name has (``%``, ``_``, …) is refused;
* IP addresses: a dotted quad in canonical form (``127.0.0.1``) must be listed exactly — a
  wildcard never matches one; other numeric spellings the system resolver would still accept
  (``2130706433``, ``127.1``, ``0x7f.1``) and IPv6 literals are refused;
* ``capabilities.network.allow`` entries: ``api.github.com`` matches that host only,
  ``*.example.com`` its subdomains at any depth but not ``example.com`` itself. An entry
  without a port allows the scheme's default port only (80 for http, 443 for https); an entry
  with one (``localhost:8080``) allows that port only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import NamedTuple

from framework.errors import UrlRefused
from framework.runtime.governance.calls import Decision, allow, deny, shown

RULE = "capabilities.network.allow"

_DNS_NAME = re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)*")
_NUMERIC_LABEL = re.compile(r"\d+|0x[0-9a-f]*")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Target(NamedTuple):
    """Where a request goes: ``host`` in ASCII, the ``port`` it will use, and the host as read."""

    scheme: str
    host: str
    port: int
    readable: str

    @property
    def default_port(self) -> int:
        return _DEFAULT_PORTS[self.scheme]

    @property
    def described(self) -> str:
        return repr(self.host) if self.host == self.readable else f"{self.readable!r} (IDNA {self.host!r})"


def parse_url(url: object) -> Target:
    """Where ``url`` leads. Raises :class:`UrlRefused` with a sentence for the user."""
    import httpx  # the tools' own parser; imported here to keep this module light to load

    if not isinstance(url, str):
        raise UrlRefused(f"the URL must be a string, got {type(url).__name__}")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise UrlRefused(f"invalid URL {shown(url)}: {exc}") from exc
    if parsed.scheme not in _DEFAULT_PORTS:
        raise UrlRefused(f"only http:// and https:// URLs are allowed, got {shown(url)}")
    if parsed.userinfo:
        raise UrlRefused(
            f"URL {shown(url)} has a user name or password before '@' (its host is {parsed.host!r}); "
            "URLs with credentials are refused, remove the part before '@'"
        )
    host = parsed.raw_host.decode("ascii").lower().removesuffix(".")
    if not host:
        raise UrlRefused(f"URL {shown(url)} has no host")
    readable = parsed.host.removesuffix(".")
    if ":" in host:
        raise UrlRefused(f"URL {shown(url)} names an IPv6 address; IPv6 literals are refused, use a host name")
    labels = host.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]) and not _is_dotted_quad(host):
        raise UrlRefused(
            f"host {host!r} is a numeric address in an unusual form; write an IPv4 address as four decimal "
            "numbers (like '127.0.0.1') and list it in capabilities.network.allow"
        )
    if not _DNS_NAME.fullmatch(host):
        raise UrlRefused(f"host {readable!r} has characters a DNS name cannot have")
    return Target(parsed.scheme, host, parsed.port or _DEFAULT_PORTS[parsed.scheme], readable)


def _is_dotted_quad(host: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(host)) == host
    except ValueError:
        return False


def host_allowed(target: Target, pattern: str) -> bool:
    """Whether allowlist entry ``pattern`` admits ``target``."""
    name, _, wanted = pattern.partition(":")
    if (int(wanted) if wanted else target.default_port) != target.port:
        return False
    if name.startswith("*."):
        return not _is_dotted_quad(target.host) and target.host.endswith(name[1:])
    return target.host == name


def check_url(url: object, allowed: Sequence[str] | None, *, what: str) -> Decision:
    """Whether ``url`` may be reached under the allowlist ``allowed`` (None: no capabilities declared).

    ``what`` names the call in messages, e.g. ``"http.get"`` or ``"remote agent"``.
    """
    try:
        target = parse_url(url)
    except UrlRefused as exc:
        return deny(f"{what}: {exc}", RULE)
    entries = list(allowed or [])
    for pattern in entries:
        if host_allowed(target, pattern):
            return allow(f"host {target.host!r} matches {pattern!r} in {RULE}", RULE)
    host, port = target.host, target.port
    wanted = host if port == target.default_port else f"{host}:{port}"
    same_host = [p for p in entries if p.partition(":")[0] == host]
    if same_host:
        ports = ", ".join(f"{p!r} allows port {p.partition(':')[2] or target.default_port}" for p in same_host)
        return deny(
            f"{what}: port {port} of host {target.described} is not allowed ({ports}); add {wanted!r} to {RULE}", RULE
        )
    if allowed is None:
        start, add = "the agent declares no capabilities", f"add capabilities: {{network: {{allow: [{wanted!r}]}}}}"
    else:
        start, add = f"it is not in {RULE}", f"add {wanted!r} to {RULE}"
    tail = "" if _is_dotted_quad(host) else f" (or '*.{host}' for its subdomains)"
    if host != target.readable:
        tail += "; the name is internationalised: make sure it is not a look-alike of the host you meant"
    return deny(f"{what}: host {target.described} is not allowed: {start}; {add}{tail}", RULE)
