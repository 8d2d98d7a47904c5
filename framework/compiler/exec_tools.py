"""The builtin tools that leave the process: ``shell`` (argv, no shell) and ``http.get``.

``http.get`` follows redirects itself, one hop at a time: every URL it is about to request, the
first and each ``Location``, passes the same check (the agent's ``network.allow`` through
``ToolContext.access``, then the scheme and host), so a redirect cannot lead where a direct
call could not go. A refused hop fails the call with the denial a direct call would get, and
names the redirect that led there.

Split from :mod:`framework.compiler.builtin_tools`, which builds them into tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from langchain_core.tools import ToolException

from framework.compiler.tool_context import OVERHANG, ToolContext, failure_line, head
from framework.spec.capabilities import SHELL_BASE_ENV, ShellCapabilities
from framework.spec.common import shown

if TYPE_CHECKING:
    # httpx is imported by the functions that use it: a run whose agent fetches nothing does not
    # load it (nor the rich console that httpx's own command line pulls in), ~0.1 s of a cold start.
    import httpx

HTTP_TIMEOUT = 20.0
HTTP_MAX_REDIRECTS = 5
HTTP_BODY_LIMIT = 256 * 1024
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
"""Statuses whose ``Location`` ``http.get`` follows (every one with GET: the tool only reads)."""
_SHELL_DEFAULTS = ShellCapabilities()


# --- shell ------------------------------------------------------------------------------------


def command_env(names: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command: only :data:`SHELL_BASE_ENV` and ``names``, taken from ``environ``.

    An allowlist, not a filter: a credential reaches the command only when the agent's
    ``capabilities.shell.env`` names it. ``environ`` defaults to the ``ca`` process's own
    environment (not ``.env``, whose values are for ``${VAR}`` in the YAML). Names that are
    not set are left out, as a shell would.
    """
    source = os.environ if environ is None else environ
    return {name: source[name] for name in dict.fromkeys((*SHELL_BASE_ENV, *names)) if name in source}


def _kill(proc: asyncio.subprocess.Process) -> None:
    # The command runs in its own session: kill the whole group, children included.
    with contextlib.suppress(ProcessLookupError):  # it already exited
        if sys.platform == "win32":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)


async def _drain(proc: asyncio.subprocess.Process, limit: int) -> tuple[bytes, int, int]:
    """Read all output (so the child never blocks on a full pipe), keep ``limit`` bytes, wait for exit."""
    assert proc.stdout is not None
    kept = bytearray()
    total = 0
    while chunk := await proc.stdout.read(65536):
        total += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept), total, await proc.wait()


async def run_command(ctx: ToolContext, command: str) -> str:
    """Implementation of ``shell``: the command line split with shlex and run without a shell."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ToolException(f"cannot split the command line: {exc}") from exc
    if not argv:
        raise ToolException("the command line is empty")
    limits = ctx.capabilities.shell if ctx.capabilities else _SHELL_DEFAULTS
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ctx.root,
            env=command_env(limits.env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise ToolException(f"command not found: {argv[0]}") from exc
    except PermissionError as exc:
        raise ToolException(f"permission denied: {argv[0]} cannot be executed") from exc
    except OSError as exc:
        raise ToolException(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    try:
        output, total, code = await asyncio.wait_for(_drain(proc, limits.max_output_bytes + OVERHANG), limits.timeout)
    except TimeoutError as exc:
        raise ToolException(f"command timed out after {limits.timeout:g} s and was killed: {command}") from exc
    finally:
        if proc.returncode is None:
            _kill(proc)
            await proc.wait()
    limit = limits.max_output_bytes
    text = head(ctx, output, limit, lambda part: part.decode("utf-8", errors="replace"))
    lines = [text.rstrip("\n")] if output else []
    if total > limit:
        lines.append(f"[output truncated: showing the first {limit} of {total} bytes]")
    lines.append(f"exit code {code}")
    return "\n".join(lines)


# --- http -------------------------------------------------------------------------------------


def _check_url(url: str) -> httpx.URL:
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolException(f"invalid URL {url!r}: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise ToolException(f"only http:// and https:// URLs can be fetched, got {url!r}")
    if not parsed.host:
        raise ToolException(f"URL {url!r} has no host")
    return parsed


def _admit(ctx: ToolContext, url: str) -> httpx.URL:
    """``url``, parsed, if it may be requested: one check for the first URL and for every redirect."""
    if ctx.access is not None and (refusal := ctx.access.url(url)):
        raise ToolException(f"denied: {refusal}")
    return _check_url(url)


def _next_hop(ctx: ToolContext, start: str, current: httpx.URL, response: httpx.Response, hop: int) -> httpx.URL | None:
    """Where the redirect ``response`` (the answer to hop number ``hop``) leads, admitted like the
    first URL; None when it is not a redirect to follow."""
    import httpx

    location = response.headers.get("location")
    if response.status_code not in REDIRECT_CODES or location is None:
        return None
    if hop == HTTP_MAX_REDIRECTS:
        raise ToolException(f"GET {start} failed: more than {HTTP_MAX_REDIRECTS} redirects")
    try:
        # An absolute Location is checked as written (the text a direct call would give), a
        # relative one once resolved against the current URL.
        target = location if urlsplit(location).scheme else str(current.join(location))
    except (httpx.InvalidURL, ValueError) as exc:
        raise ToolException(
            f"GET {start} failed: redirect {hop + 1} ({response.status_code}) has an invalid Location "
            f"{shown(location)}: {exc}"
        ) from exc
    try:
        return _admit(ctx, target)
    except ToolException as exc:
        raise ToolException(f"{exc} (redirect {hop + 1} of GET {start}: {response.status_code} to {target})") from exc


def _http_failure(url: str, exc: httpx.HTTPError) -> ToolException:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return ToolException(f"GET {url} timed out after {HTTP_TIMEOUT:g} s")
    return ToolException(f"GET {url} failed: {failure_line(exc)}")


def _http_result(ctx: ToolContext, url: httpx.URL, response: httpx.Response, body: bytes) -> str:
    truncated = len(body) > HTTP_BODY_LIMIT
    charset = response.charset_encoding or "utf-8"
    try:
        b"".decode(charset)
    except LookupError:  # an unknown charset name in Content-Type
        charset = "utf-8"
    text = head(ctx, body, HTTP_BODY_LIMIT, lambda part: part.decode(charset, errors="replace"))
    lines = [f"{response.http_version} {response.status_code} {response.reason_phrase}".rstrip()]
    if response.url != url:
        lines.append(f"final URL: {response.url}")
    if content_type := response.headers.get("content-type"):
        lines.append(f"content-type: {content_type}")
    note = f"\n[body truncated: showing the first {HTTP_BODY_LIMIT} bytes]" if truncated else ""
    return "\n".join(lines) + "\n\n" + text + note


# Redirects are followed here, not by httpx, so that each hop passes _admit before it is requested.
_CLIENT_OPTIONS: dict[str, Any] = {"timeout": HTTP_TIMEOUT, "follow_redirects": False}


def http_get(ctx: ToolContext, url: str) -> str:
    """Implementation of ``http.get`` (sync)."""
    import httpx

    first = target = _admit(ctx, url)
    try:
        with httpx.Client(**_CLIENT_OPTIONS) as client:
            hop = 0
            while True:
                with client.stream("GET", target) as response:
                    following = _next_hop(ctx, url, target, response, hop)
                    if following is None:
                        body = bytearray()
                        for chunk in response.iter_bytes():
                            body += chunk
                            if len(body) > HTTP_BODY_LIMIT + OVERHANG:
                                break
                        return _http_result(ctx, first, response, bytes(body))
                target, hop = following, hop + 1
    except httpx.HTTPError as exc:
        raise _http_failure(url, exc) from exc


async def ahttp_get(ctx: ToolContext, url: str) -> str:
    """Implementation of ``http.get`` (async)."""
    import httpx

    first = target = _admit(ctx, url)
    try:
        async with httpx.AsyncClient(**_CLIENT_OPTIONS) as client:
            hop = 0
            while True:
                async with client.stream("GET", target) as response:
                    following = _next_hop(ctx, url, target, response, hop)
                    if following is None:
                        body = bytearray()
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            if len(body) > HTTP_BODY_LIMIT + OVERHANG:
                                break
                        return _http_result(ctx, first, response, bytes(body))
                target, hop = following, hop + 1
    except httpx.HTTPError as exc:
        raise _http_failure(url, exc) from exc
