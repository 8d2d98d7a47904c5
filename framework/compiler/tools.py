"""An agent's tools as langchain tools: the builtins and Python callables.

Every built tool is named for the model (dots become underscores: ``fs.read`` -> ``fs_read``)
and carries ``metadata={"ca_name": <spec name>, "capability": <fs.read | fs.write | shell |
network | python | agent>}`` so the runtime can show spec names and governance can classify
calls. Failures at call time go back to the model as error results (``handle_tool_error``);
failures to *load* a tool raise :class:`~framework.errors.ToolError`.

Agent tools (``agent: NAME or URL``, ``agents: {tags}``) are not built here: they need the
runtime's peers, and the agent-as-tool module builds them.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import threading
import traceback
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any, assert_never

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from framework.compiler.builtin_tools import ToolCapability, aguard, build_builtin, guard, resolve_path, run_sync
from framework.compiler.tool_context import ToolContext, failure_line
from framework.compiler.tool_names import model_facing_name
from framework.errors import ToolError
from framework.spec.agent import LlmAgent
from framework.spec.common import did_you_mean
from framework.spec.tools import AgentSelector, AgentTool, BuiltinTool, McpTool, PythonTool

USER_MODULE_PREFIX = "ca_user_tools"
"""Python tool files are imported as ``ca_user_tools.<path slug>_<hash of the path>_<hash of the source>``."""


ToolHook = Callable[[BaseTool, str], BaseTool]
"""Wraps one tool of agent ``str`` (``ca test``'s cassettes record or replay what leaves the process)."""


def build_tools(agent: LlmAgent, ctx: ToolContext) -> list[BaseTool]:
    """The agent's builtin and python tools, in the order of its ``tools:`` list.

    Agent tools (``agent:`` and ``agents:`` entries) are skipped: the agent-as-tool module builds
    them; so are MCP tools (``mcp:``, built by ``mcp_tools.py``). Raises :class:`ToolError` when a python tool cannot be loaded or two tools would reach
    the model under the same name.
    """
    tools: list[BaseTool] = []
    seen: dict[str, str] = {}
    for ref in agent.tools:
        match ref:
            case BuiltinTool():
                tool = build_builtin(ref.builtin, ctx)
            case PythonTool():
                tool = load_python_tool(ref, ctx)
            case AgentTool() | AgentSelector() | McpTool():
                continue
            case _:
                assert_never(ref)
        ca_name = str(tool.metadata["ca_name"]) if tool.metadata else tool.name
        if tool.name in seen:
            raise ToolError(
                f"agent {agent.name!r}: tools {seen[tool.name]!r} and {ca_name!r} both reach the model as "
                f"{tool.name!r}; give the python tool another `name:`"
            )
        seen[tool.name] = ca_name
        tools.append(tool)
    return tools


def load_python_tool(tool: PythonTool, ctx: ToolContext) -> BaseTool:
    """Import ``tools/file.py:func`` (a file inside the project) or ``package.module:func`` as a tool.

    The argument schema comes from the type hints, the description from the docstring (Google-style
    ``Args:`` sections describe the arguments) unless ``tool.description`` overrides it. Async
    functions are supported. Any exception the function raises becomes an error result for the model.
    """
    module = _import_file(tool, ctx) if tool.is_file else _import_module(tool)
    func = getattr(module, tool.function, None)
    if func is None or not callable(func):
        public = [n for n in vars(module) if not n.startswith("_")]
        hint = did_you_mean(tool.function, public)
        raise ToolError(
            f"python tool {tool.python!r}: {tool.target!r} has no function {tool.function!r}"
            + (f"; {hint}" if hint else "")
        )
    name: str = tool.name or str(getattr(func, "__name__", tool.function))
    described = _described(func, name, tool)
    if inspect.iscoroutinefunction(func):
        coroutine = aguard(func)

        @functools.wraps(func)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return run_sync(func(*args, **kwargs))

        sync = guard(blocking)
    else:
        sync, coroutine = guard(func), None
    capability: ToolCapability = "python"
    return StructuredTool(
        name=model_facing_name(name),
        description=described.description,
        args_schema=described.args_schema,
        func=sync,
        coroutine=coroutine,
        handle_tool_error=True,
        metadata={"ca_name": name, "capability": capability},
    )


def _described(func: Callable[..., Any], name: str, tool: PythonTool) -> StructuredTool:
    """A throwaway tool built from the original function: its schema and description."""
    is_async = inspect.iscoroutinefunction(func)
    doc = inspect.cleandoc(func.__doc__ or "")

    def build(parse_docstring: bool) -> StructuredTool:
        return StructuredTool.from_function(
            func=None if is_async else func,
            coroutine=func if is_async else None,
            name=name,
            # None lets langchain take the summary of a Google-style docstring.
            description=tool.description or (None if parse_docstring else doc or f"Calls {tool.python}."),
            parse_docstring=parse_docstring,
            error_on_invalid_docstring=parse_docstring,
        )

    try:
        try:
            return build(parse_docstring=True)
        except ValueError:  # not a Google-style docstring: the whole docstring describes the tool
            return build(parse_docstring=False)
    except Exception as exc:
        raise ToolError(
            f"python tool {tool.python!r}: cannot describe {name!r} to the model: {failure_line(exc)}"
        ) from exc


def _module_name(rel: str, path: Path, source: bytes) -> str:
    """The module of one version of a tool file: two versions imported at once (a hot reload's while
    the last one's import still runs) never share ``sys.modules`` entries."""
    slug = re.sub(r"\W", "_", rel.removesuffix(".py")).strip("_") or "tool"
    where = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    version = hashlib.sha256(source).hexdigest()[:12]
    return f"{USER_MODULE_PREFIX}.{slug}_{where}_{version}"


def _line_in(exc: BaseException, path: Path) -> int | None:
    """The last line of ``path`` in the exception's traceback."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return lines[-1] if lines else None


def _import_file(tool: PythonTool, ctx: ToolContext) -> ModuleType:
    rel = tool.target
    try:
        path = resolve_path(ctx.root, rel)
    except ToolException as exc:
        raise ToolError(f"python tool {tool.python!r}: {exc}") from exc
    if not path.is_file():
        raise ToolError(f"python tool {tool.python!r}: file {rel!r} not found in the project")
    # The bytes the project was validated with (a later edit is the next reload's), else the file's.
    source = ctx.sources.get(rel)
    if source is None:
        source = path.read_bytes()
    name = _module_name(rel, path, source)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ToolError(f"python tool {tool.python!r}: {rel!r} cannot be imported as a Python file")
    # One import of a version of a file at a time (two agents using it compile in threads of their
    # own): its module is registered before it runs, like a normal import, since pydantic,
    # dataclasses and typing look a class's module up by name while its classes are made. Another
    # version (a fix saved while an import of the last one hangs) has a module of its own.
    with _importing(name):
        return _run_file(tool, spec, name, path, rel, source)


def _importing(name: str) -> threading.Lock:
    with _IMPORT_LOCKS_LOCK:
        return _IMPORT_LOCKS.setdefault(name, threading.Lock())


_IMPORT_LOCKS: dict[str, threading.Lock] = {}
_IMPORT_LOCKS_LOCK = threading.Lock()


def _run_file(tool: PythonTool, spec: ModuleSpec, name: str, path: Path, rel: str, source: bytes) -> ModuleType:
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module

    def unregister() -> None:  # only this import's module: another version's import may have replaced it
        if sys.modules.get(name) is module:
            del sys.modules[name]

    try:
        # Compiled from source, never from __pycache__: Python trusts a cached entry whose recorded
        # mtime (whole seconds) and size match, so a quick same-size edit would otherwise run old
        # code after a reload.
        code = compile(source, str(path), "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the user's declared tool file, as an import would run it
    except SyntaxError as exc:
        unregister()
        where = rel if exc.filename and Path(exc.filename) == path else (exc.filename or rel)
        raise ToolError(
            f"{where}:{exc.lineno or 0}:{exc.offset or 0}: syntax error in python tool {tool.python!r}: {exc.msg}"
        ) from exc
    except (Exception, SystemExit) as exc:  # SystemExit: a tool file calling exit() must not stop `ca`
        unregister()
        line = _line_in(exc, path)
        where = f"{rel}:{line}" if line else rel
        raise ToolError(f"{where}: importing python tool {tool.python!r} failed: {failure_line(exc)}") from exc
    except BaseException:  # e.g. KeyboardInterrupt: no half-run module left registered
        unregister()
        raise
    return module


def _import_module(tool: PythonTool) -> ModuleType:
    try:
        return importlib.import_module(tool.target)
    except SyntaxError as exc:
        raise ToolError(
            f"{exc.filename}:{exc.lineno or 0}:{exc.offset or 0}: syntax error in python tool "
            f"{tool.python!r}: {exc.msg}"
        ) from exc
    except (Exception, SystemExit) as exc:
        raise ToolError(
            f"python tool {tool.python!r}: cannot import module {tool.target!r}: {failure_line(exc)}"
        ) from exc


__all__ = ["ToolCapability", "build_tools", "load_python_tool"]
