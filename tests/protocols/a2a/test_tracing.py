"""One trace across two real `ca serve` processes, exported over OTLP/HTTP to a receiver in the test.

Server A serves ``boss``, whose tool is the agent ``echo`` of server B. Both export to the
receiver (the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``); it decodes each request with
opentelemetry-proto. A's ``execute_tool echo`` span is the ancestor of B's ``invoke_agent echo``:
one trace id from the first caller to the callee, across the HTTP hop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_peers import result_of, user_message
from tests.conftest import REPO, free_port, run_ca, write_project
from tests.otlp import Exported, ancestors, otlp_receiver, traced_env, wait_for_spans
from tests.serving import start_serve


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Exported]]]:
    with otlp_receiver() as received:
        yield received


@pytest.mark.parametrize("sdk_spans", [True, False], ids=["with-a2a-sdk-spans", "ca-spans-only"])
def test_a_call_between_two_servers_is_one_trace(
    tmp_path: Path, receiver: tuple[str, list[Exported]], sdk_spans: bool
) -> None:
    endpoint, spans = receiver
    # Without a2a-sdk's spans (the cheap setting, docs/observability.md) ca's own middleware still parents the run.
    switch = {} if sdk_spans else {"OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false"}
    b_root = write_project(tmp_path / "b", {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    b = start_serve(b_root, env={**traced_env(endpoint, "server-b"), **switch})
    try:
        a_root = write_project(
            tmp_path / "a",
            {
                "agents/boss.yaml": f"""
                    name: boss
                    profile: autonomous
                    tools: [{{agent: "{b.url}/agents/echo/"}}]
                    capabilities: {{network: {{allow: ["127.0.0.1:{b.port}"]}}}}
                """
            },
        )
        a = start_serve(a_root, env={**traced_env(endpoint, "server-a"), **switch})
        try:
            text = "@tool echo " + json.dumps({"input": "hello from A"})
            answer = result_of(a.rpc("SendMessage", {"message": user_message(text)}, agent="boss"))
        finally:
            a.stop()
    finally:
        b.stop()
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer

    wait_for_spans(spans, lambda got: {"server-a", "server-b"} <= {s.service for s in got})
    [boss] = [s for s in spans if s.name == "invoke_agent boss" and s.service == "server-a"]
    [tool] = [s for s in spans if s.name == "execute_tool echo" and s.service == "server-a"]
    [echo] = [s for s in spans if s.name == "invoke_agent echo" and s.service == "server-b"]
    assert boss.trace_id == tool.trace_id == echo.trace_id
    assert echo.attributes["gen_ai.agent.name"] == "echo" and echo.attributes["ca.state"] == "completed"
    assert tool.attributes["gen_ai.tool.name"] == "echo"
    above = ancestors(echo, spans)
    assert tool in above and boss in above, [(s.service, s.name) for s in above]
    hop = above[: above.index(tool)]
    assert all(s.service == "server-b" for s in hop)  # a2a-sdk's server spans on B, below A's tool call
    assert bool(hop) is sdk_spans, [s.name for s in hop]  # without them, the run is the tool call's child
    assert any(s.name.startswith("a2a.") for s in spans) is sdk_spans


def _imported(stderr: str) -> set[str]:
    """The modules a process imported, from its ``PYTHONPROFILEIMPORTTIME`` lines (``-X importtime``)."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def _sdk(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))}


OURS = ("opentelemetry.sdk.trace.export", "opentelemetry.exporter")
"""What only ca's tracing imports: the span processors and the exporters."""


@pytest.fixture(scope="module")
def langchains_own() -> set[str]:
    """What of the SDK LangChain imports by itself when the SDK is installed: its langsmith client
    tries ``opentelemetry.sdk.trace`` at import, which loading any chat model does. Not ours to
    avoid; what ca adds to it is what these tests measure."""
    code = "import langchain_core.language_models.chat_models"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return _sdk(_imported(done.stderr))


@pytest.mark.parametrize("traced", [False, True], ids=["off", "on"])
def test_ca_run_adds_nothing_of_the_otel_sdk_unless_telemetry_is_on(
    tmp_path: Path, traced: bool, langchains_own: set[str]
) -> None:
    write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    # On: export to a port nobody listens on (the export fails quietly after the run; the import is what counts).
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}", "OTEL_BSP_EXPORT_TIMEOUT": "500"}
    result = run_ca("run", "echo", "hi", cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1", **(on if traced else {})})
    assert result.returncode == 0, result.stderr[-3000:]
    modules = _imported(result.stderr)
    assert "framework.runtime.runtime" in modules  # the run went through the runtime, and was measured
    added = _sdk(modules) - langchains_own
    assert bool(added) is traced, sorted(added)
    assert any(m.startswith(OURS) for m in modules) is traced


def test_ca_serve_with_telemetry_off_adds_nothing_of_the_otel_sdk(tmp_path: Path, langchains_own: set[str]) -> None:
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    server = start_serve(root, env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        answer = result_of(server.rpc("SendMessage", {"message": user_message("hello")}))
        streamed = server.post(
            {"jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage", "params": {"message": user_message("hi")}},
            path="/agents/echo/",
            headers={"A2A-Version": "1.0", "Accept": "text/event-stream"},
        )
    finally:
        server.stop()
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert streamed.status_code == 200 and "TASK_STATE_COMPLETED" in streamed.text
    modules = _imported(server.stderr())
    assert {"framework.protocols.a2a.http", "framework.runtime.runtime"} <= modules  # served, and measured
    assert not _sdk(modules) - langchains_own, sorted(_sdk(modules) - langchains_own)
    assert not [m for m in modules if m.startswith(OURS)]


BUILD_SERVER = """
import asyncio, inspect, sys
from contextlib import AsyncExitStack
from pathlib import Path
from a2a.utils import telemetry
from framework.protocols.a2a.http import build_app
from framework.runtime.runtime import Runtime
from framework.spec import load_project

def wrapped():
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("a2a."):
            for owner in [module, *(v for v in vars(module).values() if inspect.isclass(v))]:
                found += [f"{name}.{k}" for k, v in vars(owner).items() if getattr(v, "__code__", None)
                          and v.__code__.co_filename == telemetry.__file__ and hasattr(v, "__wrapped__")]
    return sorted(set(found))

async def main():
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(Path(sys.argv[1])), source="a2a-http", stack=stack)
        before = wrapped()
        build_app(runtime)
        print(len(before), len(wrapped()), wrapped()[:5])

asyncio.run(main())
"""


@pytest.mark.parametrize("sdk_spans", ["true", "false"])
def test_with_a2a_sdks_spans_off_its_methods_run_without_their_span_wrappers(tmp_path: Path, sdk_spans: str) -> None:
    """Off (ca's default without tracing), a2a-sdk's no-op wrappers cost ~8% of a request: the served
    classes get their own methods back. On, every wrapper stays (the trace test above sees its spans)."""
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    env = {**os.environ, "PYTHONPATH": str(REPO), "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": sdk_spans}
    done = subprocess.run(
        [sys.executable, "-c", BUILD_SERVER, str(root)], env=env, capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, after, left = done.stdout.split(" ", 2)
    assert int(before) > 20  # the request handler, queues, dispatchers and task manager are wrapped at import
    assert int(after) == (int(before) if sdk_spans == "true" else 0), left


def test_a_wrong_exporter_name_is_one_clear_error(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    result = run_ca("run", "echo", "hi", cwd=tmp_path, env={"OTEL_TRACES_EXPORTER": "jaeger"})
    assert result.returncode == 2, result.stderr
    assert "OTEL_TRACES_EXPORTER names 'jaeger': ca knows 'otlp', 'console' and 'none'" in result.stderr
    assert "Traceback" not in result.stderr
