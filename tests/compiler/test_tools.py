"""The compiler's tools: builtins confined to the project root, python tools, and error results."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from pydantic import Field

from framework.compiler import builtin_tools
from framework.compiler.builtin_tools import build_builtin
from framework.compiler.tool_context import ToolContext
from framework.compiler.tools import build_tools, load_python_tool
from framework.errors import ToolError
from framework.spec.agent import LlmAgent
from framework.spec.capabilities import Capabilities
from framework.spec.tools import BUILTIN_TOOLS, PythonTool

# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project folder inside ``tmp_path`` (so there is an "outside" next to it)."""
    project = tmp_path / "project"
    project.mkdir()
    return project


def ctx_for(root: Path, **shell: Any) -> ToolContext:
    caps = Capabilities.model_validate({"shell": shell}) if shell else None
    return ToolContext(root=root, agent="tester", capabilities=caps)


def call(tool: BaseTool, **args: Any) -> ToolMessage:
    """Invoke a tool the way the agent's tool node does: with a ToolCall, getting a ToolMessage."""
    result = tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})
    assert isinstance(result, ToolMessage)
    return result


def acall(tool: BaseTool, **args: Any) -> ToolMessage:
    result = asyncio.run(tool.ainvoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args}))
    assert isinstance(result, ToolMessage)
    return result


def ok(message: ToolMessage) -> str:
    assert message.status == "success", message.content
    assert isinstance(message.content, str)
    return message.content


def error(message: ToolMessage) -> str:
    assert message.status == "error", message.content
    assert isinstance(message.content, str)
    return message.content


def builtin(root: Path, name: str, **shell: Any) -> BaseTool:
    return build_builtin(name, ctx_for(root, **shell))


# --- names and metadata -----------------------------------------------------------------------


def test_every_builtin_is_named_for_the_model_and_tagged_with_its_capability(root: Path) -> None:
    for name, capability in BUILTIN_TOOLS.items():
        tool = builtin(root, name)
        assert tool.name == name.replace(".", "_")
        assert tool.metadata == {"ca_name": name, "capability": capability}
        assert tool.handle_tool_error is True


def test_build_tools_keeps_the_agent_order_and_skips_agent_tools(root: Path) -> None:
    (root / "tools").mkdir()
    (root / "tools" / "lint.py").write_text('def lint(path: str) -> str:\n    """Lint a file."""\n    return path\n')
    agent = LlmAgent.model_validate(
        {
            "name": "a",
            "tools": [
                "shell",
                {"agent": "helper"},
                {"python": "tools/lint.py:lint"},
                {"agents": {"tags": ["x"]}},
                "fs.read",
            ],
        }
    )
    tools = build_tools(agent, ctx_for(root))
    assert [t.name for t in tools] == ["shell", "lint", "fs_read"]
    assert [t.metadata for t in tools] == [
        {"ca_name": "shell", "capability": "shell"},
        {"ca_name": "lint", "capability": "python"},
        {"ca_name": "fs.read", "capability": "fs.read"},
    ]


def test_build_tools_refuses_two_tools_with_the_same_model_name(root: Path) -> None:
    (root / "t.py").write_text('def f() -> str:\n    """F."""\n    return ""\n')
    agent = LlmAgent.model_validate({"name": "a", "tools": ["fs.read", {"python": "t.py:f", "name": "fs_read"}]})
    with pytest.raises(ToolError, match=r"tools 'fs.read' and 'fs_read' both reach the model as 'fs_read'"):
        build_tools(agent, ctx_for(root))


# --- fs ---------------------------------------------------------------------------------------


def test_fs_read_returns_the_text_of_a_file(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.txt").write_bytes("héllo\n".encode() + b"\xff")
    assert ok(call(builtin(root, "fs.read"), path="src/a.txt")) == "héllo\n\ufffd"


def test_fs_read_truncates_a_long_file_and_says_so(root: Path) -> None:
    (root / "big.txt").write_text("x" * (builtin_tools.READ_LIMIT + 10))
    text = ok(call(builtin(root, "fs.read"), path="big.txt"))
    assert text.startswith("x" * 100)
    assert text.endswith(
        f"[truncated: showing the first {builtin_tools.READ_LIMIT} of {builtin_tools.READ_LIMIT + 10} bytes]"
    )


def test_fs_read_of_a_missing_file_or_a_folder_is_an_error_result(root: Path) -> None:
    (root / "d").mkdir()
    assert error(call(builtin(root, "fs.read"), path="nope.txt")) == "no such file: 'nope.txt'"
    assert error(call(builtin(root, "fs.read"), path="d")) == "'d' is a folder; use fs.list to see its entries"


def test_fs_write_creates_folders_and_reports_the_bytes_written(root: Path) -> None:
    text = ok(call(builtin(root, "fs.write"), path="new/deep/n.txt", content="héllo"))
    assert text == "wrote 6 bytes to new/deep/n.txt"
    assert (root / "new" / "deep" / "n.txt").read_text(encoding="utf-8") == "héllo"


def test_fs_write_async_replaces_an_existing_file(root: Path) -> None:
    (root / "a.txt").write_text("old")
    assert ok(acall(builtin(root, "fs.write"), path="a.txt", content="new")) == "wrote 3 bytes to a.txt"
    assert (root / "a.txt").read_text() == "new"


def test_fs_list_shows_sorted_entries_with_folders_marked(root: Path) -> None:
    (root / "b.txt").write_text("")
    (root / "a").mkdir()
    (root / "c").mkdir()
    (root / "c" / "x.py").write_text("")
    assert ok(call(builtin(root, "fs.list"))) == "a/\nb.txt\nc/"
    assert ok(call(builtin(root, "fs.list"), path="c")) == "x.py"
    assert ok(call(builtin(root, "fs.list"), path="a")) == "(empty folder)"


def test_fs_list_caps_the_number_of_entries(root: Path) -> None:
    for i in range(builtin_tools.LIST_LIMIT + 5):
        (root / f"f{i:05}").touch()
    lines = ok(call(builtin(root, "fs.list"))).splitlines()
    assert len(lines) == builtin_tools.LIST_LIMIT + 1
    assert lines[-1] == "[5 more entries not shown]"


def test_fs_search_finds_lines_and_skips_tool_folders_and_binaries(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("import os\nTODO: fix\n")
    (root / "notes.md").write_text("nothing\n  TODO later\n")
    for skipped in (".git", ".venv", ".ca", "node_modules"):
        (root / skipped).mkdir()
        (root / skipped / "x.txt").write_text("TODO hidden\n")
    (root / "blob.bin").write_bytes(b"TODO\0binary")
    text = ok(call(builtin(root, "fs.search"), pattern=r"TODO\b"))
    assert text.splitlines() == ["notes.md:2:   TODO later", "src/a.py:2: TODO: fix"]
    assert ok(call(builtin(root, "fs.search"), pattern="import", path="src")) == "src/a.py:1: import os"


def test_fs_search_reports_no_matches_bad_patterns_and_caps_results(root: Path) -> None:
    (root / "a.txt").write_text("hit\n" * (builtin_tools.SEARCH_LIMIT + 3))
    search = builtin(root, "fs.search")
    assert ok(call(search, pattern="zzz")) == "no matches for 'zzz' in ."
    assert error(call(search, pattern="(")).startswith("invalid regular expression '(':")
    lines = ok(call(search, pattern="hit")).splitlines()
    assert len(lines) == builtin_tools.SEARCH_LIMIT + 1
    assert lines[-1].startswith(f"[stopped after {builtin_tools.SEARCH_LIMIT} matches")


def test_fs_search_does_not_read_files_behind_symlinks_that_leave_the_root(root: Path) -> None:
    (root.parent / "secret.txt").write_text("TODO secret\n")
    (root / "leak.txt").symlink_to(root.parent / "secret.txt")
    assert ok(call(builtin(root, "fs.search"), pattern="TODO")).splitlines() == [
        "no matches for 'TODO' in .",
        "[1 file(s) skipped: they lie outside capabilities.fs.read or the project (a link counts as where it leads)]",
    ]


# --- confinement ------------------------------------------------------------------------------

ESCAPES = [
    ("../x", "is outside the project root"),
    ("a/../../x", "is outside the project root"),
    ("/etc/passwd", "is absolute"),
    ("~", "starts with '~'"),
    ("~/x", "starts with '~'"),
    ("a\0b", "contains a control character"),
    ("C:\\x", "is absolute"),
    ("C:/Windows/win.ini", "is absolute"),
    ("\\\\server\\share\\x", "is absolute"),
    ("\\etc\\passwd", "is absolute"),
    ("..\\x", "is outside the project root"),
    ("a\\..\\..\\x", "is outside the project root"),
    ("link_out", "through a symbolic link"),
    ("linkdir/secret.txt", "through a symbolic link"),
]


@pytest.fixture
def escape_root(root: Path) -> Path:
    """A project with an outside secret, a symlink to it and a symlinked folder leading out."""
    outside = root.parent
    (outside / "x").write_text("TOP-SECRET")
    (outside / "secret.txt").write_text("TOP-SECRET")
    (root / "a").mkdir()
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    return root


@pytest.mark.parametrize(("path", "reason"), ESCAPES, ids=[repr(p) for p, _ in ESCAPES])
def test_fs_read_refuses_every_path_that_escapes_the_root(escape_root: Path, path: str, reason: str) -> None:
    message = error(call(builtin(escape_root, "fs.read"), path=path))
    assert message.startswith(f"path {path!r} ")
    assert reason in message
    assert "TOP-SECRET" not in message


@pytest.mark.parametrize(("path", "reason"), ESCAPES, ids=[repr(p) for p, _ in ESCAPES])
def test_fs_write_refuses_every_path_that_escapes_the_root(escape_root: Path, path: str, reason: str) -> None:
    before = {p: p.read_text() for p in escape_root.parent.glob("*") if p.is_file()}
    assert reason in error(call(builtin(escape_root, "fs.write"), path=path, content="pwned"))
    assert {p: p.read_text() for p in escape_root.parent.glob("*") if p.is_file()} == before
    assert not (escape_root.parent / "linkdir").exists()


def test_fs_write_refuses_a_new_file_under_a_symlinked_folder_that_escapes(escape_root: Path) -> None:
    message = error(call(builtin(escape_root, "fs.write"), path="linkdir/new.txt", content="x"))
    assert "through a symbolic link" in message
    assert not (escape_root.parent / "new.txt").exists()


@pytest.mark.parametrize("name", ["fs.list", "fs.search"])
def test_fs_list_and_search_refuse_escaping_folders(escape_root: Path, name: str) -> None:
    args = {"pattern": "x"} if name == "fs.search" else {}
    assert "is outside the project root" in error(call(builtin(escape_root, name), path="..", **args))
    assert "through a symbolic link" in error(call(builtin(escape_root, name), path="linkdir", **args))


def test_percent_encoded_dots_are_refused_as_governance_refuses_them(root: Path) -> None:
    message = error(call(builtin(root, "fs.write"), path="%2e%2e/x", content="y"))
    assert message == (
        "path '%2e%2e/x' reads as '../x' once decoded; write the path plainly, without percent-escapes "
        "or look-alike characters"
    )
    assert not (root / "%2e%2e").exists()
    assert not (root.parent / "x").exists()


def test_backslashes_are_separators_and_dots_inside_the_root_are_fine(root: Path) -> None:
    assert ok(call(builtin(root, "fs.write"), path="a\\b\\..\\c.txt", content="z")) == "wrote 1 bytes to a/c.txt"
    assert ok(call(builtin(root, "fs.read"), path="./a/c.txt")) == "z"


def test_a_symlink_that_stays_inside_the_root_is_followed(root: Path) -> None:
    (root / "real.txt").write_text("inside")
    (root / "alias.txt").symlink_to(root / "real.txt")
    assert ok(call(builtin(root, "fs.read"), path="alias.txt")) == "inside"


# --- shell ------------------------------------------------------------------------------------


def test_shell_runs_in_the_root_and_reports_the_exit_code(root: Path) -> None:
    (root / "f.txt").write_text("")
    assert ok(call(builtin(root, "shell"), command="ls")) == "f.txt\nexit code 0"
    assert ok(call(builtin(root, "shell"), command="ls nope")).endswith("exit code 2")


def test_shell_never_gives_the_line_to_a_shell(root: Path) -> None:
    (root / "x").write_text("keep me")
    text = ok(call(builtin(root, "shell"), command="echo hi; rm -rf x"))
    assert text == "hi; rm -rf x\nexit code 0"
    assert (root / "x").read_text() == "keep me"
    assert ok(acall(builtin(root, "shell"), command="echo $HOME '|' `id`")) == "$HOME | `id`\nexit code 0"


def test_shell_kills_a_command_that_runs_too_long(root: Path) -> None:
    start = time.monotonic()
    message = error(acall(builtin(root, "shell", timeout=0.5), command="sleep 5"))
    assert message == "command timed out after 0.5 s and was killed: sleep 5"
    assert time.monotonic() - start < 3


def test_shell_sync_call_also_times_out(root: Path) -> None:
    assert "timed out after 0.5 s" in error(call(builtin(root, "shell", timeout=0.5), command="sleep 5"))


def test_shell_caps_the_output(root: Path) -> None:
    script = "import sys; sys.stdout.write('a' * 5000)"
    text = ok(call(builtin(root, "shell", max_output_bytes=100), command=f'{sys.executable} -c "{script}"'))
    assert text == "a" * 100 + "\n[output truncated: showing the first 100 of 5000 bytes]\nexit code 0"


def test_what_a_tool_cuts_short_is_masked_before_the_cut(root: Path) -> None:
    """A secret running across the cut is masked whole, not shown in part (the runtime's masker); the
    limit is then of what is shown."""
    secret = "sk-cut-in-half-0123456789"
    context = ToolContext(
        root=root,
        agent="tester",
        capabilities=Capabilities.model_validate({"shell": {"max_output_bytes": 20}}),
        mask=lambda text: text.replace(secret, "***"),
    )
    shown = ok(call(build_builtin("shell", context), command=f"echo 'the key: {secret} ends here'"))
    assert shown == "the key: *** ends he\n[output truncated: showing the first 20 of 45 bytes]\nexit code 0"
    (root / "big.txt").write_text("x" * (builtin_tools.READ_LIMIT - 5) + secret + "y" * 10)
    read = ok(call(build_builtin("fs.read", context), path="big.txt"))
    assert read.startswith("x" * 100) and "sk-cu" not in read
    size = builtin_tools.READ_LIMIT + len(secret) + 5
    assert read.endswith(f"x***yy\n[truncated: showing the first {builtin_tools.READ_LIMIT} of {size} bytes]")


def test_shell_combines_stdout_and_stderr(root: Path) -> None:
    script = "import sys; print('out', flush=True); print('err', file=sys.stderr); sys.exit(3)"
    assert ok(call(builtin(root, "shell"), command=f'{sys.executable} -c "{script}"')) == "out\nerr\nexit code 3"


def test_shell_reports_a_missing_command_and_a_bad_line(root: Path) -> None:
    assert error(call(builtin(root, "shell"), command="no-such-cmd-xyz --flag")) == "command not found: no-such-cmd-xyz"
    assert (
        error(call(builtin(root, "shell"), command="echo 'open"))
        == "cannot split the command line: No closing quotation"
    )
    assert error(call(builtin(root, "shell"), command="   ")) == "the command line is empty"


def test_shell_passes_a_variable_only_when_shell_env_names_it(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CA_VISIBLE", "yes")
    monkeypatch.setenv("CA_UNLISTED", "no")
    monkeypatch.setenv("FOO_API_KEY", "sk-123")
    text = ok(call(builtin(root, "shell", env=["CA_VISIBLE"]), command="env"))
    assert "CA_VISIBLE=yes" in text
    for name in ("CA_UNLISTED", "FOO_API_KEY", "sk-123"):
        assert name not in text


def test_shell_tells_the_model_which_variables_the_command_sees(root: Path) -> None:
    tool = builtin(root, "shell", env=["DATABASE_URL"])
    assert "environment holds only PATH, HOME, TERM, TZ, the locale (LANG and the LC_ categories), DATABASE_URL." in (
        tool.description
    )


# --- http.get ---------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/hello")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = ("x" * (builtin_tools.HTTP_BODY_LIMIT + 5)).encode() if self.path == "/big" else b"hello there"
        self.send_response(200 if self.path != "/missing" else 404)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_http_get_returns_the_status_line_and_body(root: Path, server: str) -> None:
    expected = "HTTP/1.1 200 OK\ncontent-type: text/plain; charset=utf-8\n\nhello there"
    assert ok(call(builtin(root, "http.get"), url=f"{server}/hello")) == expected
    assert ok(acall(builtin(root, "http.get"), url=f"{server}/hello")) == expected


def test_http_get_follows_redirects_and_keeps_error_statuses_as_results(root: Path, server: str) -> None:
    text = ok(call(builtin(root, "http.get"), url=f"{server}/moved"))
    assert text.startswith(f"HTTP/1.1 200 OK\nfinal URL: {server}/hello\n")
    assert ok(acall(builtin(root, "http.get"), url=f"{server}/missing")).startswith("HTTP/1.1 404 Not Found")


def test_http_get_caps_the_body(root: Path, server: str) -> None:
    text = ok(acall(builtin(root, "http.get"), url=f"{server}/big"))
    assert text.endswith("x\n[body truncated: showing the first 262144 bytes]")
    assert text.split("\n\n", 1)[1].count("x") == builtin_tools.HTTP_BODY_LIMIT


def test_http_get_refuses_other_schemes_and_reports_network_errors(root: Path, server: str) -> None:
    tool = builtin(root, "http.get")
    assert (
        error(call(tool, url="file:///etc/passwd"))
        == "only http:// and https:// URLs can be fetched, got 'file:///etc/passwd'"
    )
    assert error(call(tool, url="ftp://example.com/x")).startswith("only http:// and https://")
    port = server.rsplit(":", 1)[1]
    closed = f"http://127.0.0.1:{int(port) + 1 if int(port) < 65535 else 1}/"
    assert error(acall(tool, url=closed)).startswith(f"GET {closed} failed: ConnectError:")


# --- python tools -----------------------------------------------------------------------------


def write_tool(root: Path, rel: str, source: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")


def test_python_tool_schema_comes_from_hints_and_a_google_docstring(root: Path) -> None:
    write_tool(
        root,
        "tools/lint.py",
        '''
        from __future__ import annotations

        def lint(path: str, strict: bool = False) -> str:
            """Lint one file.

            Args:
                path: File to lint.
                strict: Treat warnings as errors.
            """
            return f"linted {path} strict={strict}"
        ''',
    )
    tool = load_python_tool(PythonTool(python="tools/lint.py:lint"), ctx_for(root))
    assert tool.name == "lint"
    assert tool.description == "Lint one file."
    assert tool.metadata == {"ca_name": "lint", "capability": "python"}
    schema = tool.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    assert schema["required"] == ["path"]
    assert schema["properties"]["path"] == {"description": "File to lint.", "title": "Path", "type": "string"}
    assert schema["properties"]["strict"]["type"] == "boolean"
    assert ok(call(tool, path="a.py")) == "linted a.py strict=False"


def test_python_tool_with_a_plain_docstring_and_overrides(root: Path) -> None:
    write_tool(
        root,
        "t.py",
        'def count(n: int) -> int:\n    """Count to n.\n\n    Not Google style.\n    """\n    return n + 1\n',
    )
    plain = load_python_tool(PythonTool(python="t.py:count"), ctx_for(root))
    assert plain.description == "Count to n.\n\nNot Google style."
    assert ok(call(plain, n=2)) == "3"
    named = load_python_tool(PythonTool(python="t.py:count", name="counter.v2", description="Counts."), ctx_for(root))
    assert (named.name, named.description, named.metadata) == (
        "counter_v2",
        "Counts.",
        {"ca_name": "counter.v2", "capability": "python"},
    )


def test_python_tool_without_a_docstring_gets_a_description(root: Path) -> None:
    write_tool(root, "t.py", "def f(x: str) -> str:\n    return x\n")
    assert load_python_tool(PythonTool(python="t.py:f"), ctx_for(root)).description == "Calls t.py:f."


def test_async_python_tool_runs_sync_and_async(root: Path) -> None:
    write_tool(
        root,
        "t.py",
        '''
        import asyncio

        async def wait(seconds: float) -> str:
            """Wait a little."""
            await asyncio.sleep(seconds)
            return "done"
        ''',
    )
    tool = load_python_tool(PythonTool(python="t.py:wait"), ctx_for(root))
    assert ok(acall(tool, seconds=0)) == "done"
    assert ok(call(tool, seconds=0)) == "done"


def test_python_tool_exceptions_become_error_results(root: Path) -> None:
    write_tool(
        root,
        "t.py",
        '''
        def boom(x: int) -> str:
            """Always fails."""
            raise ValueError(f"bad value {x}")

        async def aboom() -> str:
            """Always fails too."""
            raise KeyError("k")
        ''',
    )
    assert (
        error(call(load_python_tool(PythonTool(python="t.py:boom"), ctx_for(root)), x=3)) == "ValueError: bad value 3"
    )
    assert error(acall(load_python_tool(PythonTool(python="t.py:aboom"), ctx_for(root)))) == "KeyError: 'k'"


def test_python_tool_file_with_a_syntax_error_names_file_and_line(root: Path) -> None:
    write_tool(root, "tools/bad.py", "def ok() -> None:\n    pass\n\ndef broken(:\n    pass\n")
    with pytest.raises(ToolError) as info:
        load_python_tool(PythonTool(python="tools/bad.py:ok"), ctx_for(root))
    assert str(info.value).startswith("tools/bad.py:4:")
    assert "syntax error in python tool 'tools/bad.py:ok'" in str(info.value)


def test_python_tool_file_failing_at_import_names_file_line_and_error(root: Path) -> None:
    write_tool(root, "t.py", "import os\nraise RuntimeError('no config')\n")
    with pytest.raises(ToolError, match=r"^t.py:2: importing python tool 't.py:f' failed: RuntimeError: no config$"):
        load_python_tool(PythonTool(python="t.py:f"), ctx_for(root))
    write_tool(root, "u.py", "import no_such_module_xyz\n")
    with pytest.raises(ToolError, match=r"^u.py:1: .*ModuleNotFoundError: No module named 'no_such_module_xyz'"):
        load_python_tool(PythonTool(python="u.py:f"), ctx_for(root))


def test_python_tool_missing_file_function_or_outside_file_is_a_tool_error(root: Path) -> None:
    write_tool(root, "t.py", 'def lint() -> str:\n    """L."""\n    return ""\n')
    (root.parent / "evil.py").write_text("def f() -> None: ...\n")
    cases = {
        "nope.py:f": "python tool 'nope.py:f': file 'nope.py' not found in the project",
        "t.py:lnt": "python tool 't.py:lnt': 't.py' has no function 'lnt'; did you mean 'lint'?",
        "../evil.py:f": "python tool '../evil.py:f': path '../evil.py' is outside the project root",
    }
    for ref, message in cases.items():
        with pytest.raises(ToolError) as info:
            load_python_tool(PythonTool(python=ref), ctx_for(root))
        assert str(info.value).startswith(message)


def test_python_tool_from_a_module(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tool(root, "mypkg/__init__.py", "")
    write_tool(root, "mypkg/helpers.py", 'def shout(text: str) -> str:\n    """Shout."""\n    return text.upper()\n')
    monkeypatch.syspath_prepend(str(root))
    tool = load_python_tool(PythonTool(python="mypkg.helpers:shout"), ctx_for(root))
    assert ok(call(tool, text="hi")) == "HI"
    with pytest.raises(ToolError, match=r"cannot import module 'mypkg.nope': ModuleNotFoundError"):
        load_python_tool(PythonTool(python="mypkg.nope:shout"), ctx_for(root))


# --- through create_agent ---------------------------------------------------------------------


class ScriptedChat(BaseChatModel):
    """Replies with the scripted messages in order; binding tools changes nothing."""

    replies: list[AIMessage]
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-test"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.replies[len(self.seen) - 1])])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:
        return self


def test_a_failing_tool_gives_the_agent_an_error_result_and_the_run_continues(root: Path) -> None:
    from langchain.agents import create_agent

    write_tool(root, "t.py", 'def explode(x: int) -> str:\n    """Explode."""\n    raise RuntimeError("kaboom")\n')
    agent = LlmAgent.model_validate({"name": "a", "tools": ["fs.read", {"python": "t.py:explode"}]})
    tools = build_tools(agent, ctx_for(root))
    model = ScriptedChat(
        replies=[
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "fs_read", "args": {"path": "../../etc/passwd"}, "id": "c1", "type": "tool_call"},
                    {"name": "explode", "args": {"x": 1}, "id": "c2", "type": "tool_call"},
                ],
            ),
            AIMessage(content="recovered"),
        ],
    )
    graph = create_agent(model, tools)
    for run in (graph.invoke, lambda state: asyncio.run(graph.ainvoke(state))):
        model.seen.clear()
        result = run({"messages": [HumanMessage("go")]})
        tool_messages = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert [(m.name, m.status, m.content) for m in tool_messages] == [
            ("fs_read", "error", "path '../../etc/passwd' is outside the project root; '..' may not climb out of it"),
            ("explode", "error", "RuntimeError: kaboom"),
        ]
        assert result["messages"][-1].content == "recovered"
        assert len(model.seen) == 2


def test_environment_is_left_untouched(root: Path) -> None:
    """The command's environment is a copy: running a command never edits os.environ."""
    before = dict(os.environ)
    call(builtin(root, "shell"), command="true")
    assert dict(os.environ) == before


def test_one_tool_file_loaded_by_two_agents_at_once_gives_each_its_own_whole_module(root: Path) -> None:
    """Two agents using one file compile in threads of their own; the file's module is registered
    under one name while it runs (pydantic resolves a model's field types through it), so two
    imports at once must not run into each other: each agent's tool validates with its own classes."""
    (root / "tools").mkdir()
    (root / "tools" / "orders.py").write_text(
        textwrap.dedent(
            '''
            from __future__ import annotations

            import time

            from pydantic import BaseModel

            time.sleep(0.3)


            class Item(BaseModel):
                name: str


            time.sleep(0.3)


            class Order(BaseModel):
                items: list[Item]


            def order(items: list[str]) -> str:
                """Make an order and say whether its items are this module's items."""
                made = Order.model_validate({"items": [{"name": n} for n in items]})
                return str(all(isinstance(item, Item) for item in made.items))
            '''
        )
    )
    tools: list[BaseTool] = []

    def load() -> None:
        tools.append(load_python_tool(PythonTool(python="tools/orders.py:order"), ctx_for(root)))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)  # the second import starts while the first one runs
    for thread in threads:
        thread.join()
    assert [ok(call(tool, items=["tea"])) for tool in tools] == ["True", "True"]
