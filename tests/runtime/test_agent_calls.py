"""Agents call agents, through real processes on loopback.

Project A is served by `ca serve` (the remote agents); project C is served too (a hub whose agents
call A's, so a chain runs between two `ca serve` processes); project B is only run from the command
line (`ca run` / `ca approve`) and calls A's agents as tools. Next to them: project K (an agent whose
tool sleeps; its server is SIGKILLed mid-call), a tiny Starlette app that answers garbage, and an echo
agent written with the plain a2a-sdk (no CleverAgents code). Every process starts once for the module,
all at the same time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_text_parts, new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState
from langchain_core.tools import ToolException

from framework.protocols.a2a.client import Peers
from framework.runtime.tasks import TaskStore
from framework.spec import load_project
from tests.a2a_peers import PLAIN_ECHO
from tests.conftest import CA, SIDE_EFFECT, events, free_ports, run_ca, write_project, writer_agent
from tests.serving import SERVER_ENV, ServerProcess, launch_script, launch_serve

pytestmark = pytest.mark.e2e

# -- the garbage server (the plain a2a-sdk agent is tests.a2a_peers.PLAIN_ECHO) ----------------

GARBAGE = '''
    """Agents that answer garbage: broken cards, broken JSON-RPC, slow or flaky answers."""

    import asyncio
    import sys

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    PORT = int(sys.argv[1])
    CARD = ".well-known/agent-card.json"
    counts = {}


    def card(name):
        return {
            "name": name,
            "description": "answers junk",
            "version": "1",
            "supportedInterfaces": [
                {"url": f"http://127.0.0.1:{PORT}/{name}/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": False},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "junk", "name": "junk", "description": "junk", "tags": ["junk"]}],
        }


    def counted(name, respond):
        async def endpoint(request):
            counts[name] = counts.get(name, 0) + 1
            return await respond(request, counts[name])

        return endpoint


    async def valid_card(request, n):
        return JSONResponse(card(request.url.path.split("/")[1]))


    async def slowly(request, n):
        await asyncio.sleep(30)
        return PlainTextResponse("too late")


    async def flaky(request, n):
        return await valid_card(request, n) if n > 2 else PlainTextResponse("busy", status_code=503)


    async def private(request, n):
        if request.headers.get("x-token") != "s3cret":
            return PlainTextResponse("who are you?", status_code=401)
        return await valid_card(request, n)


    async def text(body, status=200, media_type="application/json"):
        return Response(body, status_code=status, media_type=media_type)


    answers = {
        f"/notjson/{CARD}": lambda r, n: text("<html>hello</html>", media_type="text/html"),
        f"/empty/{CARD}": lambda r, n: text("{}"),
        f"/null/{CARD}": lambda r, n: text("null"),
        f"/junkrpc/{CARD}": valid_card,
        "/junkrpc/": lambda r, n: text("this is not JSON-RPC"),
        f"/wrongrpc/{CARD}": valid_card,
        "/wrongrpc/": lambda r, n: text('{"jsonrpc": "2.0", "id": 1, "result": {"hello": 1}}'),
        f"/err500/{CARD}": valid_card,
        "/err500/": lambda r, n: text("boom", status=500, media_type="text/plain"),
        f"/slow/{CARD}": valid_card,
        "/slow/": slowly,
        f"/hang/{CARD}": slowly,
        f"/flaky/{CARD}": flaky,
        f"/broken/{CARD}": lambda r, n: text("boom", status=500, media_type="text/plain"),
        f"/private/{CARD}": private,
    }
    routes = [
        Route(path, counted(path, respond), methods=["GET", "POST"]) for path, respond in answers.items()
    ]
    routes.append(Route("/counts", lambda request: JSONResponse(counts)))
    routes.append(Route("/ready", lambda request: PlainTextResponse("ok")))
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=PORT, log_level="warning", timeout_graceful_shutdown=1)
'''

# -- the projects -----------------------------------------------------------------------------

NAP = '''
    import asyncio
    from pathlib import Path


    async def nap(seconds: float) -> str:
        """Leave a mark, then sleep."""
        Path("napping").write_text("yes")
        await asyncio.sleep(seconds)
        return "rested"
'''


def writer(name: str, file: str) -> str:
    """A manual-profile agent whose only tool call appends 'hello' to ``file``, then answers 'written'."""
    return writer_agent(name, file, reply="written", description="Writes a note, with a person's approval")


def caller(name: str, urls: list[str], *, allow: str | None, budget: str = "{}") -> str:
    """An autonomous offline agent with remote agents as tools; ``allow``: its network capability."""
    tools = "".join(f"\n          - agent: {url}" for url in urls)
    capabilities = f'capabilities: {{network: {{allow: ["{allow}"]}}}}' if allow else ""
    return f"""
        name: {name}
        profile: autonomous
        budget: {budget}
        tools:{tools}
        {capabilities}
    """


def ask(tool: str, text: str) -> str:
    """The @tool line that makes an offline agent ask agent-tool ``tool`` ``text``."""
    return f"@tool {tool} " + json.dumps({"input": text})


LIST = '@tool fs.list {"path": "."}'
ERRAND = "list the folder ten times\n" + "\n".join([LIST] * 10)
GARBAGE_ROUTES = ["notjson", "empty", "null", "junkrpc", "wrongrpc", "err500", "nothing"]


@dataclass
class Net:
    a: ServerProcess
    """`ca serve` of project A: the remote agents."""
    c: ServerProcess
    """`ca serve` of project C: agents that call A's (a chain between two servers)."""
    k: ServerProcess
    """`ca serve` of project K: an agent whose tool sleeps 10 s (the kill test SIGKILLs it)."""
    garbage: ServerProcess
    plain: ServerProcess
    """The plain a2a-sdk echo agent."""
    b: Path
    """Project B: agents run with `ca run` that call the servers' agents."""

    def agent_url(self, server: ServerProcess, name: str) -> str:
        return f"{server.url}/agents/{name}/"


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    logs = tmp_path_factory.mktemp("logs")
    pa, pc, pk, pg, pe = free_ports(5)
    a_url, k_url, g_url, e_url = (f"http://127.0.0.1:{p}" for p in (pa, pk, pg, pe))
    a = write_project(
        tmp_path_factory.mktemp("a"),
        {
            "agents/echo.yaml": "name: echo\n",
            "agents/writer.yaml": writer("writer", "writer.log"),
            "agents/scribe.yaml": writer("scribe", "scribe.log"),
            "agents/lister.yaml": """
                name: lister
                profile: autonomous
                tools: [fs.list]
                capabilities: {fs: {read: ["**"]}}
            """,
            "agents/relay.yaml": """
                name: relay
                profile: autonomous
                tools: [{agent: echo}]
                capabilities: {agents: [echo]}
            """,
            "tools/side.py": SIDE_EFFECT,
        },
    )
    here = f"127.0.0.1:{pa}"
    c = write_project(
        tmp_path_factory.mktemp("c"),
        {
            "agents/hub.yaml": caller("hub", [f"{a_url}/agents/scribe/"], allow=here),
            "agents/thrifty.yaml": caller("thrifty", [f"{a_url}/agents/lister/"], allow=here, budget="{max_turns: 3}"),
        },
    )
    k = write_project(
        tmp_path_factory.mktemp("k"),
        {
            "agents/sleepy.yaml": """
                name: sleepy
                profile: autonomous
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{name: nap, args: {seconds: 10}}]
                    - rested
                tools:
                  - python: tools/nap.py:nap
            """,
            "tools/nap.py": NAP,
        },
    )
    b = write_project(
        tmp_path_factory.mktemp("b"),
        {
            "agents/boss.yaml": caller("boss", [f"{a_url}/agents/echo/", f"{a_url}/agents/writer/"], allow=here),
            "agents/loner.yaml": caller("loner", [f"{a_url}/agents/echo/"], allow=None),
            "agents/shallow.yaml": caller("shallow", [f"{a_url}/agents/relay/"], allow=here, budget="{max_depth: 1}"),
            "agents/waiter.yaml": caller("waiter", [f"{k_url}/agents/sleepy/"], allow=f"127.0.0.1:{pk}"),
            "agents/gullible.yaml": caller(
                "gullible", [f"{g_url}/{route}/" for route in GARBAGE_ROUTES], allow=f"127.0.0.1:{pg}"
            ),
            "agents/mixer.yaml": f"""
                name: mixer
                profile: autonomous
                tools: [{{agent: "{e_url}/", name: plain}}]
                capabilities: {{network: {{allow: ["127.0.0.1:{pe}"]}}}}
            """,
            "agents/manager.yaml": """
                name: manager
                profile: autonomous
                tools: [{agent: helper}]
                capabilities: {agents: [helper]}
            """,
            "agents/helper.yaml": "name: helper\nprofile: autonomous\n",
        },
    )
    scripts = tmp_path_factory.mktemp("scripts")
    procs = [
        launch_serve(a, logs=logs, port=pa, name="serve-a", env=SERVER_ENV),
        launch_serve(c, logs=logs, port=pc, name="serve-c", env=SERVER_ENV),
        launch_serve(k, logs=logs, port=pk, name="serve-k", env=SERVER_ENV),
        launch_script("garbage", GARBAGE, scripts, logs, pg),
        launch_script("plain_echo", PLAIN_ECHO, scripts, logs, pe),
    ]
    try:
        for proc in procs:
            proc.wait_ready()
        yield Net(a=procs[0], c=procs[1], k=procs[2], garbage=procs[3], plain=procs[4], b=b)
    finally:
        for proc in procs:
            proc.stop()
    for proc in procs[:2]:  # A and C shut down cleanly; no request crashed them
        assert proc.proc.returncode in (0, -signal.SIGTERM), proc.output()
        assert "Exception in ASGI application" not in proc.output(), proc.output()


# -- helpers ----------------------------------------------------------------------------------


def tasks_of(root: Path, agent: str) -> list[dict[str, Any]]:
    """``ca tasks list --json`` of a project, only ``agent``'s tasks."""
    listed = run_ca("tasks", "list", "--json", "--limit", "1000", cwd=root)
    assert listed.returncode == 0, listed.stderr
    return [t for t in json.loads(listed.stdout) if t["agent"] == agent]


def tool_results(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == "tool_result" and not e["source"]]


def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One raw JSON-RPC request (A2A v1.0); its result."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    response = httpx.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def send_text(url: str, parts: list[dict[str, Any]], *, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """SendMessage (blocking): a new task, or a message to ``task``; the task it answers."""
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts}
    if task is not None:
        message |= {"taskId": task["id"], "contextId": task["contextId"]}
    result = rpc(url, "SendMessage", {"message": message})
    answered: dict[str, Any] = result["task"]
    return answered


def status_parts(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The text and the data part of a task's status message."""
    parts = task["status"]["message"]["parts"]
    text = "".join(p.get("text", "") for p in parts)
    [data] = [p["data"] for p in parts if "data" in p]
    assert isinstance(data, dict)
    return text, data


# -- a remote call ----------------------------------------------------------------------------


def test_a_remote_agent_answers_as_a_tool(net: Net) -> None:
    result = run_ca("run", "boss", ask("echo", "hello from B"), "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    [answer] = tool_results(evs)
    assert (answer["tool"], answer["result"], answer["is_error"]) == ("echo", "[echo] You said: hello from B", False)
    end = evs[-1]
    assert end["state"] == "completed" and end["output"].endswith("echo: [echo] You said: hello from B")
    [remote] = [t for t in tasks_of(net.a.root, "echo") if t["input"] == "hello from B"]
    assert remote["state"] == "completed" and remote["source"] == "a2a-http"


def test_a_remote_callees_progress_streams_nested_under_its_tool(net: Net) -> None:
    result = run_ca("run", "boss", ask("echo", "stream this back please"), "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    nested = [e for e in evs if e.get("source") == ["echo"]]
    streamed = "".join(e["text"] for e in nested if e["kind"] == "text")
    assert streamed and "stream this back please" in streamed  # the callee's reply, as it streamed
    [answer] = tool_results(evs)
    assert evs.index(nested[0]) < evs.index(answer)  # progress arrives before the tool's result


def test_a_remote_call_without_the_network_capability_is_denied(net: Net) -> None:
    result = run_ca("run", "loner", ask("echo", "let me in"), "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    [denied] = tool_results(evs)
    assert denied["is_error"] and denied["result"].startswith("denied: remote agent: host '127.0.0.1' is not allowed")
    assert f"add capabilities: {{network: {{allow: ['127.0.0.1:{net.a.port}']}}}}" in denied["result"]
    assert evs[-1]["state"] == "completed"  # the model saw the refusal and answered
    assert not [t for t in tasks_of(net.a.root, "echo") if t["input"] == "let me in"]  # nothing reached A


# -- approvals across hops --------------------------------------------------------------------


def test_an_approval_two_hops_down_is_approved_at_the_top_from_a_new_process(net: Net) -> None:
    writer_url = net.agent_url(net.a, "writer")
    paused = run_ca("run", "boss", ask("writer", "write the note"), "--json", cwd=net.b)
    assert paused.returncode == 3, paused.stderr
    evs = events(paused.stdout)
    [pause] = [e for e in evs if e["kind"] == "paused"]
    payload = pause["payload"]
    assert payload["kind"] == "approval" and payload["remote"] == writer_url
    assert (payload["agent"], payload["tool"], payload["args"]) == (
        "writer",
        "append",
        {"file": "writer.log", "text": "hello"},
    )
    assert (
        payload["message"]
        == f'writer (remote, {writer_url}): writer wants to run append {{"file": "writer.log", "text": "hello"}}'
    )
    end = evs[-1]
    assert end["state"] == "input-required"
    task = end["task_id"]
    assert f"ca approve {task[:12]}" in paused.stderr
    assert not (net.a.root / "writer.log").exists()  # nothing ran before the decision
    [waiting] = tasks_of(net.a.root, "writer")  # A's side: one task, paused on the same action
    assert waiting["id"] == payload["remoteTask"] and waiting["state"] == "input-required"
    assert waiting["pending"][0]["payload"]["tool"] == "append"

    approved = run_ca("approve", task[:12], "--json", cwd=net.b)  # a new process
    assert approved.returncode == 0, approved.stderr
    evs = events(approved.stdout)
    assert [(r["tool"], r["result"], r["is_error"]) for r in tool_results(evs)] == [("writer", "written", False)]
    assert evs[-1]["state"] == "completed" and evs[-1]["output"].endswith("writer: written")
    assert (net.a.root / "writer.log").read_text() == "hello\n"  # the side effect ran exactly once
    [done] = tasks_of(net.a.root, "writer")  # and the resumed caller continued the same remote task
    assert done["id"] == payload["remoteTask"] and done["state"] == "completed" and done["output"] == "written"
    [boss] = [t for t in tasks_of(net.b, "boss") if t["id"] == task]
    assert boss["state"] == "completed" and not boss["pending"]


def test_an_approval_two_hops_down_between_two_servers_is_approved_over_http(net: Net) -> None:
    hub = net.agent_url(net.c, "hub")
    task = send_text(hub, [{"text": ask("scribe", "write the note")}])
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    text, data = status_parts(task)
    [pending] = data["pending"]
    assert (pending["agent"], pending["tool"], pending["remote"]) == (
        "scribe",
        "append",
        net.agent_url(net.a, "scribe"),
    )
    assert "scribe wants to run append" in text and "Reply 'approve'" in text
    # The top-level client sees one pending approval naming the remote agent and its action.
    [listed] = rpc(hub, "_cleveragents/approvals/list", {})["approvals"]
    assert listed["taskId"] == task["id"] and [p["tool"] for p in listed["pending"]] == ["append"]
    assert not (net.a.root / "scribe.log").exists()

    done = send_text(hub, [{"data": {"decision": "approve"}}], task=task)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
    [artifact] = done["artifacts"]
    assert artifact["parts"][0]["text"].endswith("scribe: written")
    assert (net.a.root / "scribe.log").read_text() == "hello\n"
    [remote] = tasks_of(net.a.root, "scribe")
    assert remote["id"] == pending["remoteTask"] and remote["state"] == "completed"
    assert rpc(hub, "_cleveragents/approvals/list", {})["approvals"] == []


# -- budgets across hops ----------------------------------------------------------------------


def test_a_budget_exhausted_by_the_remote_callee_stops_the_whole_chain(net: Net) -> None:
    thrifty = net.agent_url(net.c, "thrifty")
    text = "delegate twice\n" + ask("lister", ERRAND) + "\n" + ask("lister", ERRAND)
    task = send_text(thrifty, [{"text": text}])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    # thrifty (max_turns 3) used one turn to call lister: lister got the 2 turns left, not its own budget.
    [artifact] = task["artifacts"]
    assert artifact["parts"][0]["text"] == "Stopped: task budget max_turns reached: used 3 of 3."
    results = [e for e in _ca_events(task) if e["kind"] == "tool_result" and not e.get("source")]
    assert [(r["tool"], r["result"]) for r in results] == [
        ("lister", "Stopped: task budget max_turns reached: used 2 of 2.")
    ]  # the second call never happened: thrifty paid for lister's two turns (1 + 2 = 3)
    [remote] = [t for t in tasks_of(net.a.root, "lister") if t["input"] == ERRAND]
    assert remote["usage"]["model_calls"] == 2 and remote["usage"]["tool_calls"] == 2
    status = rpc(thrifty, "GetTask", {"id": task["id"]})
    assert status["status"]["state"] == "TASK_STATE_COMPLETED"
    audit = rpc(thrifty, "_cleveragents/audit/query", {"taskId": task["id"], "kind": "budget"})["records"]
    assert [(r["data"]["limit"], r["data"]["used"], r["data"]["cap"]) for r in audit] == [("max_turns", 3, 3)]


def _ca_events(task: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        p["data"]["caEvent"]
        for m in task.get("history", [])
        for p in m["parts"]
        if isinstance(p.get("data"), dict) and "caEvent" in p["data"]
    ]


def test_call_depth_is_limited_across_hops(net: Net) -> None:
    # shallow (max_depth 1) → A's relay (depth 1) → relay's own call of echo would be depth 2.
    result = run_ca("run", "shallow", ask("relay", ask("echo", "deep down")), "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    [relayed] = tool_results(events(result.stdout))
    assert not relayed["is_error"]
    assert relayed["result"] == "[relay] You said:\necho failed: denied: agent calls may nest 1 deep"


# -- remote failures become tool errors -------------------------------------------------------


def test_a_remote_server_killed_mid_call_gives_a_tool_error_not_a_hang(net: Net, tmp_path: Path) -> None:
    # The deadline of a remote call (peers.Peers(timeout=60)) cannot be set from a project or the
    # command line, so the server is killed while its agent sleeps: the connection error path.
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        run = subprocess.Popen(
            [*CA, "run", "waiter", ask("sleepy", "take a nap"), "--json"],
            cwd=net.b,
            env={**os.environ, **SERVER_ENV},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while not (net.k.root / "napping").exists():
            assert run.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the remote agent never started its nap"
            time.sleep(0.05)
        net.k.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = run.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert code == 0, err.read_text()
    assert took < 15, f"the caller needed {took:.1f} s to notice"
    evs = events(out.read_text())
    [failed] = tool_results(evs)
    url = net.agent_url(net.k, "sleepy")
    assert failed["is_error"] and failed["result"].startswith(f"remote agent {url} ")
    assert evs[-1]["state"] == "completed" and "sleepy failed: remote agent" in evs[-1]["output"]
    assert "Traceback" not in err.read_text()


def test_remote_agents_answering_garbage_give_tool_errors(net: Net) -> None:
    text = "try them all\n" + "\n".join(ask(route, "hello?") for route in GARBAGE_ROUTES)
    result = run_ca("run", "gullible", text, "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    results = {r["tool"]: r for r in tool_results(evs)}
    assert list(results) == GARBAGE_ROUTES
    assert all(r["is_error"] for r in results.values()), results
    base = net.garbage.url
    expected = {
        "notjson": f"{base}/notjson/ answered something that is not an agent card",
        "empty": f"{base}/empty/: its agent card offers no usable interface",
        "null": f"{base}/null/ answered something that is not an agent card",
        "junkrpc": f"remote agent {base}/junkrpc/ answered with an error",
        "wrongrpc": f"remote agent {base}/wrongrpc/ answered with an error",
        "err500": f"remote agent {base}/err500/ answered with an error",
        "nothing": f"{base}/nothing/ has no agent card (HTTP 404)",
    }
    for route, start in expected.items():
        assert results[route]["result"].startswith(start), results[route]
    assert evs[-1]["state"] == "completed"


# -- the client side in-process: card cache, retries, deadlines, headers ---------------------


def _peers(root: Path, environ: dict[str, str], timeout: float = 60.0) -> tuple[Peers, TaskStore]:
    tasks = TaskStore.open(root)
    return Peers(load_project(root), tasks, environ, timeout=timeout), tasks


def _counts(net: Net) -> dict[str, int]:
    counts: dict[str, int] = httpx.get(f"{net.garbage.url}/counts", timeout=10).json()
    return counts


def test_cards_are_cached_and_revalidated_with_their_etag(net: Net, tmp_path: Path) -> None:
    root = write_project(tmp_path, {"agents/me.yaml": "name: me\n"})
    statuses: list[int] = []

    async def go() -> None:
        peers, tasks = _peers(root, {})

        async def seen(response: httpx.Response) -> None:
            statuses.append(response.status_code)

        peers.client_for(net.a.url).event_hooks["response"] = [seen]
        try:
            first = await peers.card(net.agent_url(net.a, "echo"))
            second = await peers.card(net.agent_url(net.a, "echo"))
        finally:
            await peers.close()
            tasks.close()
        assert first.name == "echo" and second is first  # 304 Not Modified: the cached card

    asyncio.run(go())
    assert statuses == [200, 304]


def test_card_fetches_retry_transient_failures_only_and_never_hang(net: Net, tmp_path: Path) -> None:
    root = write_project(tmp_path, {"agents/me.yaml": "name: me\n"})

    async def go() -> None:
        peers, tasks = _peers(root, {}, timeout=1.0)
        try:
            card = await peers.card(f"{net.garbage.url}/flaky/")  # 503, 503, then the card
            assert card.name == "flaky"
            with pytest.raises(ToolException, match=r"/broken/ has no agent card \(HTTP 500\)"):
                await peers.card(f"{net.garbage.url}/broken/")  # a 500 is not transient: asked once
            started = time.monotonic()
            with pytest.raises(ToolException, match=r"ReadTimeout"):
                await peers.card(f"{net.garbage.url}/hang/")
            assert time.monotonic() - started < 5
            started = time.monotonic()
            with pytest.raises(ToolException, match=r"remote agent .*/slow/"):
                await peers.call_tool(f"{net.garbage.url}/slow/", "are you there?")
            assert time.monotonic() - started < 5
        finally:
            await peers.close()
            tasks.close()

    asyncio.run(go())
    counts = _counts(net)
    card = ".well-known/agent-card.json"
    assert counts[f"/flaky/{card}"] == 3 and counts[f"/broken/{card}"] == 1


def test_registry_headers_come_from_the_environment(net: Net, tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        {
            "ca.yaml": f"""
                registries:
                  - name: junk
                    url: {net.garbage.url}/private
                    headers_env: {{X-Token: JUNK_TOKEN}}
            """,
            "agents/me.yaml": "name: me\n",
        },
    )

    async def go() -> None:
        with_token, tasks = _peers(root, {"JUNK_TOKEN": "s3cret"})
        without, _ = _peers(root, {})
        try:
            assert (await with_token.card(f"{net.garbage.url}/private/")).name == "private"
            with pytest.raises(ToolException, match=r"has no agent card \(HTTP 401\)"):
                await without.card(f"{net.garbage.url}/private/")
        finally:
            await with_token.close()
            await without.close()
            tasks.close()

    asyncio.run(go())


# -- local calls are tasks --------------------------------------------------------------------


def test_a_local_agent_call_is_a_task_with_its_parent_and_its_own_audit(net: Net) -> None:
    result = run_ca("run", "manager", ask("helper", "help me"), "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    [helped] = tool_results(evs)
    assert helped["result"] == "[helper] You said: help me" and not helped["is_error"]
    parent = evs[-1]["task_id"]
    [child] = [t for t in tasks_of(net.b, "helper") if t["parent"] == parent]
    assert child["id"] != parent and child["source"] == "agent-call"
    assert (child["state"], child["input"], child["output"]) == ("completed", "help me", "[helper] You said: help me")
    [manager] = [t for t in tasks_of(net.b, "manager") if t["id"] == parent]
    assert manager["usage"]["model_calls"] == 3  # its two turns and the helper's one: the caller pays

    log = run_ca("audit", "--task", child["id"], cwd=net.b)
    assert log.returncode == 0, log.stderr
    lines = log.stdout.splitlines()
    kinds = (" agent-call task.state ", " agent-call model.call ")  # its states, and its own model's calls
    assert all(f"task={child['id']}" in line and any(k in line for k in kinds) for line in lines), lines
    assert f"parent={parent}" in lines[0] and "state=submitted" in lines[0]
    assert "state=completed" in lines[-1]


# -- interop with the plain a2a-sdk -----------------------------------------------------------


def test_an_agent_served_by_the_plain_a2a_sdk_is_a_remote_tool(net: Net) -> None:
    result = run_ca("run", "mixer", ask("plain", "ping"), "--json", cwd=net.b)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    [answer] = tool_results(evs)
    assert (answer["tool"], answer["result"], answer["is_error"]) == ("plain", "plain echo: ping", False)
    assert evs[-1]["output"].endswith("plain: plain echo: ping")


def test_the_plain_a2a_sdk_client_calls_a_cleveragents_agent(net: Net) -> None:
    async def go() -> list[str]:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(net.agent_url(net.a, "echo"), client_config=ClientConfig(httpx_client=http))
            async with client:
                message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_text_part("hi there")])
                texts: list[str] = []
                async for event in client.send_message(SendMessageRequest(message=message)):
                    if event.HasField("task"):
                        texts += ["".join(get_text_parts(list(a.parts))) for a in event.task.artifacts]
                    elif event.HasField("artifact_update") and event.artifact_update.last_chunk:
                        texts.append("".join(get_text_parts(list(event.artifact_update.artifact.parts))))
                    elif event.HasField("status_update"):
                        texts.append(TaskState.Name(event.status_update.status.state))
                return texts

    texts = asyncio.run(go())
    assert "[echo] You said: hi there" in texts
    assert texts[-1] == "TASK_STATE_COMPLETED"


# -- discovery -------------------------------------------------------------------------------------


def test_registries_list_every_agent_from_every_source(net: Net, tmp_path: Path) -> None:
    project = write_project(
        tmp_path,
        {
            "ca.yaml": f"""
                version: 1
                registries:
                  - {{name: team, url: "{net.a.url}"}}
                  - {{name: plain, url: "{net.plain.url}"}}
                  - {{name: down, url: "http://127.0.0.1:9"}}
            """,
            "agents/local.yaml": "name: local\nskills: [{id: tidy, tags: [housekeeping]}]\n",
        },
    )
    result = run_ca("agents", "list", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    listed = {(a["name"], a["source"]) for a in json.loads(result.stdout)}
    assert ("local", "project") in listed
    assert {("echo", "registry:team"), ("writer", "registry:team"), ("lister", "registry:team")} <= listed
    assert any(source == "registry:plain" for _, source in listed)  # a single A2A agent, by its card
    assert "registry 'down' (http://127.0.0.1:9) unreachable" in result.stderr  # reported, not fatal
    local = next(a for a in json.loads(result.stdout) if a["name"] == "local")
    assert local["tags"] == ["housekeeping"]
