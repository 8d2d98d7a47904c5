"""The builtin tools (``fs.read``, ``fs.write``, ``fs.list``, ``fs.search``, ``shell``, ``http.get``).

Each becomes a langchain ``StructuredTool`` named for the model (``fs_read``), with sync and
async implementations. Expected failures raise ``ToolException`` with a one-line message and
every tool is built with ``handle_tool_error=True``, so the model receives an error result
(a ``ToolMessage`` with ``status="error"``) instead of the run crashing.

The tools confine themselves to the project root whatever the capabilities say: declared
globs, shell patterns and host allowlists are checked by governance before a call gets here.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, ParamSpec, Protocol, TypeVar

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel, Field

from framework.compiler.confine import confine, make_folders_confined
from framework.compiler.exec_tools import _SHELL_DEFAULTS, ahttp_get, http_get, run_command
from framework.compiler.exec_tools import HTTP_BODY_LIMIT as HTTP_BODY_LIMIT  # re-exported
from framework.compiler.exec_tools import HTTP_MAX_REDIRECTS as HTTP_MAX_REDIRECTS
from framework.compiler.exec_tools import HTTP_TIMEOUT as HTTP_TIMEOUT
from framework.compiler.fs_tools import LIST_LIMIT as LIST_LIMIT  # re-exported
from framework.compiler.fs_tools import READ_LIMIT as READ_LIMIT
from framework.compiler.fs_tools import SEARCH_LIMIT as SEARCH_LIMIT
from framework.compiler.fs_tools import (
    SEARCH_SKIP_DIRS,
    SEARCH_TIMEOUT,
    list_folder,
    reach,
    read_file,
    search_files,
    write_file,
)
from framework.compiler.tool_context import ToolContext, failure_line
from framework.compiler.tool_names import model_facing_name
from framework.errors import PathChanged, PathRefused

ToolCapability = Literal["fs.read", "fs.write", "shell", "network", "python", "agent", "mcp"]
"""What a built tool touches; carried in ``tool.metadata["capability"]`` for governance."""

P = ParamSpec("P")
T = TypeVar("T")


def guard(fn: Callable[P, T]) -> Callable[P, T]:
    """Turn any exception of ``fn`` into a ``ToolException`` so the model gets an error result.

    LangGraph's control-flow signals (interrupts) pass through untouched.
    """

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except (ToolException, GraphBubbleUp):
            raise
        except Exception as exc:
            raise ToolException(failure_line(exc)) from exc

    return run


def aguard(fn: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """The async form of :func:`guard`."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except (ToolException, GraphBubbleUp):
            raise
        except Exception as exc:
            raise ToolException(failure_line(exc)) from exc

    return run


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, on a helper thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here: the common case for sync tool calls
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def make_tool(
    ca_name: str,
    capability: ToolCapability,
    description: str,
    args_schema: type[BaseModel],
    func: Callable[..., Any],
    coroutine: Callable[..., Awaitable[Any]],
) -> StructuredTool:
    """A ``StructuredTool`` named for the model, tagged with its spec name and capability."""
    return StructuredTool.from_function(
        func=guard(func),
        coroutine=aguard(coroutine),
        name=model_facing_name(ca_name),
        description=description,
        args_schema=args_schema,
        handle_tool_error=True,
        metadata={"ca_name": ca_name, "capability": capability},
    )


# --- paths ------------------------------------------------------------------------------------


def resolve_path(root: Path, path: str) -> Path:
    """The real path of ``path`` (relative to ``root``, already real), refused unless it stays inside.

    :func:`framework.compiler.confine.confine` decides; its refusal becomes a ``ToolException``.
    """
    try:
        return root / confine(root, path)
    except PathRefused as exc:
        raise ToolException(str(exc)) from exc


class _PathArgs(BaseModel):
    path: str = Field(description="File path relative to the project root, e.g. 'src/app.py'.")


class _WriteArgs(BaseModel):
    path: str = Field(description="File path relative to the project root; missing folders are created.")
    content: str = Field(description="The complete new text of the file.")


class _ListArgs(BaseModel):
    path: str = Field(default=".", description="Folder relative to the project root (default: the root).")


class _SearchArgs(BaseModel):
    pattern: str = Field(description="A Python regular expression, matched against each line.")
    path: str = Field(default=".", description="File or folder to search, relative to the project root.")


class _ShellArgs(BaseModel):
    command: str = Field(description="One command line, e.g. 'pytest -q tests'. No shell syntax.")


class _UrlArgs(BaseModel):
    url: str = Field(description="An http:// or https:// URL.")


# --- the client's file system (ACP) -------------------------------------------------------------


class FileSystem(Protocol):
    """A client's view of the files (an IDE's unsaved buffers): ACP fs/read_text_file, fs/write_text_file."""

    async def read(self, path: Path) -> str: ...

    async def write(self, path: Path, content: str) -> None: ...


CLIENT_FS: ContextVar[FileSystem | None] = ContextVar("ca_client_fs", default=None)
"""Set by a transport whose client offers its file system; fs.read / fs.write then go through it."""


async def client_read(ctx: ToolContext, fs: FileSystem, path: str) -> str:
    rel = reach(ctx, path)  # still confined to the project root and to the capabilities
    try:
        return await fs.read(ctx.root / rel)
    except Exception as exc:  # the client's error becomes the tool's
        raise ToolException(f"cannot read {rel!r} through the editor: {exc}") from exc


async def client_write(ctx: ToolContext, fs: FileSystem, path: str, content: str) -> str:
    rel = reach(ctx, path, write=True)
    parent = rel.rpartition("/")[0]
    try:  # as on the local disk, missing folders are made (ACP leaves that to each editor: some refuse)
        await asyncio.to_thread(make_folders_confined, ctx.root, parent)
    except (OSError, PathChanged) as exc:
        raise ToolException(f"cannot write {rel!r}: cannot create its folder {parent!r}: {exc}") from exc
    try:
        await fs.write(ctx.root / rel, content)
    except Exception as exc:
        raise ToolException(f"cannot write {rel!r} through the editor: {exc}") from exc
    return f"wrote {len(content.encode())} bytes to {rel}"


# --- the tools --------------------------------------------------------------------------------


def _threaded(ctx: ToolContext, fn: Callable[..., str]) -> tuple[Callable[..., str], Callable[..., Awaitable[str]]]:
    """Sync and async (worker thread) forms of ``fn(ctx, **args)``.

    Plain closures rather than ``functools.partial``: LangGraph's tool node reads the type hints of
    a tool's function, and a partial has none it can resolve.
    """

    def run(**kwargs: Any) -> str:
        return fn(ctx, **kwargs)

    async def arun(**kwargs: Any) -> str:
        return await asyncio.to_thread(fn, ctx, **kwargs)

    return run, arun


def _fs_read(ctx: ToolContext) -> BaseTool:
    run, arun = _threaded(ctx, read_file)

    async def aread(path: str) -> str:
        fs = CLIENT_FS.get()
        return await client_read(ctx, fs, path) if fs is not None else await arun(path=path)

    return make_tool(
        "fs.read",
        "fs.read",
        f"Read a text file of the project (UTF-8). Paths are relative to the project root. "
        f"Files longer than {READ_LIMIT // 1024} KiB are truncated.",
        _PathArgs,
        run,
        aread,
    )


def _fs_write(ctx: ToolContext) -> BaseTool:
    run, arun = _threaded(ctx, write_file)

    async def awrite(path: str, content: str) -> str:
        fs = CLIENT_FS.get()
        return await client_write(ctx, fs, path, content) if fs is not None else await arun(path=path, content=content)

    return make_tool(
        "fs.write",
        "fs.write",
        "Write text to a file of the project, replacing it if it exists and creating missing folders. "
        "Paths are relative to the project root.",
        _WriteArgs,
        run,
        awrite,
    )


def _fs_list(ctx: ToolContext) -> BaseTool:
    return make_tool(
        "fs.list",
        "fs.read",
        f"List a folder of the project: one entry per line, sorted, folders end with '/'. "
        f"At most {LIST_LIMIT} entries.",
        _ListArgs,
        *_threaded(ctx, list_folder),
    )


def _fs_search(ctx: ToolContext) -> BaseTool:
    return make_tool(
        "fs.search",
        "fs.read",
        f"Search the project's text files for a Python regular expression; returns 'file:line: text' "
        f"lines (at most {SEARCH_LIMIT}). Skips {', '.join(sorted(SEARCH_SKIP_DIRS))} and binary files; "
        f"gives up after {SEARCH_TIMEOUT:g} s.",
        _SearchArgs,
        *_threaded(ctx, search_files),
    )


def _shell(ctx: ToolContext) -> BaseTool:
    limits = ctx.capabilities.shell if ctx.capabilities else _SHELL_DEFAULTS
    # The model should know why a variable it expects is missing: say what the command sees.
    passed = "".join(f", {name}" for name in limits.env)

    async def arun(command: str) -> str:
        return await run_command(ctx, command)

    def run(command: str) -> str:
        return run_sync(run_command(ctx, command))

    return make_tool(
        "shell",
        "shell",
        "Run one command in the project root; returns its combined stdout and stderr and its exit code. "
        "The line is split into words like a shell would, but no shell runs it: pipes, redirections, "
        "';', '&&', globs and $VARIABLES are passed to the program literally. "
        f"Its environment holds only PATH, HOME, TERM, TZ, the locale (LANG and the LC_ categories){passed}. "
        f"Killed after {limits.timeout:g} s; output capped at {limits.max_output_bytes} bytes.",
        _ShellArgs,
        run,
        arun,
    )


def _http_get(ctx: ToolContext) -> BaseTool:
    def run(url: str) -> str:
        return http_get(ctx, url)

    async def arun(url: str) -> str:
        return await ahttp_get(ctx, url)

    return make_tool(
        "http.get",
        "network",
        f"Fetch a URL with HTTP GET (http and https only; up to {HTTP_MAX_REDIRECTS} redirects followed, each "
        f"allowed like the URL itself). Returns the status line, "
        f"the content type and the body as text, capped at {HTTP_BODY_LIMIT // 1024} KiB.",
        _UrlArgs,
        run,
        arun,
    )


BUILDERS: dict[str, Callable[[ToolContext], BaseTool]] = {
    "fs.read": _fs_read,
    "fs.write": _fs_write,
    "fs.list": _fs_list,
    "fs.search": _fs_search,
    "shell": _shell,
    "http.get": _http_get,
}
"""Builtin tool name (as in ``framework.spec.tools.BUILTIN_TOOLS``) -> its builder."""


def build_builtin(name: str, ctx: ToolContext) -> BaseTool:
    """The builtin tool ``name`` for this context."""
    return BUILDERS[name](ctx)


def builtin_tools(ctx: ToolContext) -> dict[str, BaseTool]:
    """Every builtin tool for this context, by spec name (for workflow tool steps)."""
    return {name: build(ctx) for name, build in BUILDERS.items()}
