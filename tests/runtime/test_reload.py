"""Hot reload end to end: a real ``ca serve --reload`` process, real file edits, A2A over HTTP.

One server serves the module; every test edits its own agents (or files), so the tests do not
see each other's changes. Edits are made the two ways editors make them: a new file renamed over
the old one (``os.replace``) and a plain write in place. Nothing sleeps for a fixed time: every
wait polls what a client can observe (a card, a reply, ``_cleveragents/diagnostics``, the
server's stderr) until a deadline.
"""

from __future__ import annotations

import os
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.conftest import NAP
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

T = TypeVar("T")

RELOAD_DEADLINE = 15.0
"""Seconds a reload may take to become observable before a test fails (it takes ~50 ms)."""

SIDE = '''
    from pathlib import Path


    def append(file: str, text: str) -> str:
        """Append a line to a file."""
        with Path(file).open("a") as f:
            f.write(text + "\\n")
        return "appended"
'''


def version_tool(body: str) -> str:
    """tools/version.py; ``body`` is the line before the function (e.g. an import-time failure)."""
    return f'''
        {body}


        def version() -> str:
            """Which version of this file ran."""
            return "{{V}}"
    '''


def talker(description: str, reply: str, name: str = "talker") -> str:
    return f"""
        name: {name}
        description: {description}
        model:
          provider: scripted
          replies: ["{reply}"]
    """


def sleeper(description: str, reply: str) -> str:
    return f"""
        name: sleeper
        description: {description}
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{{name: nap, args: {{seconds: 2}}}}]
            - {reply}
        tools:
          - python: tools/nap.py:nap
    """


def gated(description: str, reply: str) -> str:
    return f"""
        name: gated
        description: {description}
        profile: manual
        model:
          provider: scripted
          replies:
            - tool_calls: [{{name: append, args: {{file: gated.log, text: hello}}}}]
            - {reply}
        tools:
          - python: tools/side.py:append
    """


TOOLY = """
    name: tooly
    profile: autonomous
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: version, args: {}}]
        - checked
    tools:
      - python: tools/version.py:version
"""

PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",
    "agents/talker.yaml": talker("Talks v1", "talk v1"),
    "agents/fragile.yaml": talker("Fragile v1", "fragile v1", name="fragile"),
    "agents/sleeper.yaml": sleeper("Sleeps v1", "old"),
    "agents/gated.yaml": gated("Gated v1", "done v1"),
    "agents/churn.yaml": talker("churn start", "churn start", name="churn"),
    "agents/tooly.yaml": TOOLY,
    "tools/nap.py": NAP,
    "tools/side.py": SIDE,
    "tools/version.py": version_tool("").replace("{V}", "v1"),
}


# -- files ----------------------------------------------------------------------------------


def save(path: Path, text: str, *, atomic: bool = True, mtime: float | None = None) -> None:
    """Save like an editor: a new file renamed over the old one, or a plain write in place.

    ``mtime`` (atomic saves only) stamps the new file before it appears, as a save within the
    same second as the last one would be.
    """
    content = textwrap.dedent(text).lstrip("\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    if atomic:
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        temp.write_text(content, encoding="utf-8")
        if mtime is not None:
            os.utime(temp, (mtime, mtime))
        os.replace(temp, path)
    else:
        path.write_text(content, encoding="utf-8")


def eventually(probe: Callable[[], T | None], what: str, timeout: float = RELOAD_DEADLINE) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
        except (httpx.TransportError, AssertionError, KeyError, ValueError) as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}; last: {last!r}")
        time.sleep(0.01)


# -- the server -----------------------------------------------------------------------------


class Server(ServerProcess):
    def stderr_with(self, text: str) -> str:
        """The server's stderr once it contains ``text``."""
        return eventually(lambda: text if text in self.stderr() else None, f"{text!r} on stderr") and self.stderr()

    def reloads(self) -> int:
        """How many reloads the server has applied (its ``reloaded:`` lines)."""
        return self.stderr().count("\nreloaded: ") + self.stderr().startswith("reloaded: ")

    # -- A2A ------------------------------------------------------------------------------

    def card(self, agent: str) -> httpx.Response:
        return httpx.get(f"{self.url}/agents/{agent}/.well-known/agent-card.json", timeout=10)

    def description(self, agent: str) -> str | None:
        response = self.card(agent)
        return str(response.json()["description"]) if response.status_code == 200 else None

    def send(
        self, agent: str, text: str, *, context: str = "", task: str = "", immediately: bool = False
    ) -> dict[str, Any]:
        """SendMessage; the task it answers."""
        message = {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            "contextId": context or uuid.uuid4().hex,
            **({"taskId": task} if task else {}),
        }
        answer = self.rpc(
            "SendMessage", {"message": message, "configuration": {"returnImmediately": immediately}}, agent=agent
        )
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]["task"]
        return result

    def get_task(self, agent: str, task_id: str) -> dict[str, Any]:
        answer = self.rpc("GetTask", {"id": task_id}, agent=agent)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def diagnostics(self) -> dict[str, Any]:
        answer = self.rpc("_cleveragents/diagnostics", agent="echo")
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def memory(self) -> tuple[int, int]:
        """(VmRSS in KiB, open file descriptors) of the server process."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        [rss] = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")]
        return rss, len(os.listdir(f"/proc/{self.proc.pid}/fd"))


def state(task: dict[str, Any]) -> str:
    return str(task["status"]["state"]).removeprefix("TASK_STATE_").lower()


def reply(task: dict[str, Any]) -> str:
    [artifact] = task["artifacts"]
    return "".join(part.get("text", "") for part in artifact["parts"])


def tool_results(task: dict[str, Any]) -> list[Any]:
    """The results of the tool calls in the task's history (``caEvent`` data parts)."""
    return [
        part["data"]["caEvent"]["result"]
        for message in task.get("history", [])
        for part in message["parts"]
        if "data" in part and part["data"].get("caEvent", {}).get("kind") == "tool_result"
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("project")
    for name, text in PROJECT.items():
        save(root / name, text, atomic=False)
    logs = tmp_path_factory.mktemp("logs")
    # Bytecode caching on, as on a user's machine: a re-imported tool must not run stale bytecode.
    srv = start_serve(
        root, "--reload", logs=logs, env={"ANTHROPIC_API_KEY": ""}, drop_env=["PYTHONDONTWRITEBYTECODE"], kind=Server
    )
    try:
        yield srv
    finally:
        srv.stop()
    srv.assert_clean_exit()


# -- tests ------------------------------------------------------------------------------------


def test_an_edited_agent_answers_with_its_new_reply_and_card(server: Server) -> None:
    path = server.root / "agents/talker.yaml"
    assert reply(server.send("talker", "hi")) == "talk v1"

    save(path, talker("Talks v2", "talk v2"))  # renamed over the old file
    eventually(lambda: server.description("talker") == "Talks v2", "the new card")
    assert reply(server.send("talker", "hi")) == "talk v2"

    save(path, talker("Talks v3", "talk v3"), atomic=False)  # written in place
    eventually(lambda: server.description("talker") == "Talks v3", "the card after an in-place write")
    assert reply(server.send("talker", "hi")) == "talk v3"
    assert server.diagnostics()["errors"] == []


def test_a_yaml_error_keeps_the_last_good_version_serving_until_fixed(server: Server) -> None:
    path = server.root / "agents/fragile.yaml"
    assert reply(server.send("fragile", "hi")) == "fragile v1"
    bundle = server.diagnostics()["bundle"]
    try:
        save(path, "name: fragile\ndescription: [broken\n", atomic=False)
        [error] = eventually(lambda: server.diagnostics()["errors"], "the error in diagnostics")
        assert (error["file"], error["line"], error["column"]) == ("agents/fragile.yaml", 2, 14)
        assert error["severity"] == "error" and "never closed" in error["message"]
        server.stderr_with("agents/fragile.yaml:2:14: error: invalid YAML")
        assert "still serving the last good version" in server.stderr_with("reload failed: 1 error(s)")

        # The old bundle serves, whole: same digest, same card, same replies.
        assert server.diagnostics()["bundle"] == bundle
        assert server.description("fragile") == "Fragile v1"
        assert reply(server.send("fragile", "still there?")) == "fragile v1"
        server.assert_alive()
    finally:
        save(path, talker("Fragile v2", "fragile v2", name="fragile"))
    eventually(lambda: server.diagnostics()["errors"] == [], "diagnostics to clear after the fix")
    assert server.description("fragile") == "Fragile v2"
    assert reply(server.send("fragile", "fixed?")) == "fragile v2"


def test_a_setting_read_at_start_up_asks_for_a_restart_and_the_rest_is_live(server: Server) -> None:
    path = server.root / "ca.yaml"
    try:
        save(path, "default_agent: talker\nserver: {max_request_bytes: 2048}\n")
        eventually(
            lambda: "restart to apply server.max_request_bytes (4194304 -> 2048)" in server.stderr(), "the notice"
        )
        root_card = httpx.get(f"{server.url}/.well-known/agent-card.json", timeout=10).json()
        assert root_card["name"] == "talker"  # default_agent is live
    finally:
        save(path, PROJECT["ca.yaml"])
    eventually(lambda: httpx.get(f"{server.url}/.well-known/agent-card.json").json()["name"] == "echo", "echo back")


def test_an_added_agent_appears_and_a_removed_one_is_not_found(server: Server) -> None:
    path = server.root / "agents/newcomer.yaml"
    assert server.card("newcomer").status_code == 404

    save(path, talker("New here", "hello from the newcomer", name="newcomer"))
    eventually(lambda: server.card("newcomer").status_code == 200, "the new agent's card")
    listed = server.rpc("_cleveragents/registry/list", agent="echo")["result"]["agents"]
    [entry] = [a for a in listed if a["name"] == "newcomer"]
    assert entry["description"] == "New here" and entry["url"] == f"{server.url}/agents/newcomer/"
    assert reply(server.send("newcomer", "hi")) == "hello from the newcomer"
    assert "newcomer" in httpx.get(f"{server.url}/healthz").json()["agents"]

    etag = server.card("newcomer").headers["etag"]
    save(path, talker("Changed", "hello from the newcomer", name="newcomer"), atomic=False)
    eventually(lambda: server.description("newcomer") == "Changed", "the changed card")
    changed = server.card("newcomer")
    assert changed.headers["etag"] != etag
    stale = httpx.get(f"{server.url}/agents/newcomer/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert stale.status_code == 200 and stale.json()["description"] == "Changed"

    path.unlink()
    eventually(lambda: server.card("newcomer").status_code == 404, "the card to disappear")
    answer = server.rpc(
        "SendMessage",
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        agent="newcomer",
        status=404,
    )
    assert answer["error"]["code"] == -32084 and "not found" in answer["error"]["message"]
    listed = server.rpc("_cleveragents/registry/list", agent="echo")["result"]["agents"]
    assert "newcomer" not in [a["name"] for a in listed]


def test_a_task_running_across_a_reload_completes_on_its_old_version(server: Server) -> None:
    path = server.root / "agents/sleeper.yaml"
    started = server.send("sleeper", "nap", immediately=True)

    def napping() -> bool:
        task = server.get_task("sleeper", started["id"])
        return state(task) == "working" and "nap" in str(task["status"].get("message", ""))

    eventually(napping, "the task to be in its 2 s tool call")
    save(path, sleeper("Sleeps v2", "new"))
    eventually(lambda: server.description("sleeper") == "Sleeps v2", "the reload")
    assert state(server.get_task("sleeper", started["id"])) == "working", "the reload came too late to prove anything"

    def finished() -> dict[str, Any] | None:
        task = server.get_task("sleeper", started["id"])
        return task if state(task) not in ("submitted", "working") else None

    done = eventually(finished, "the running task to finish")
    assert state(done) == "completed" and reply(done) == "old"
    after = server.send("sleeper", "nap again")
    assert state(after) == "completed" and reply(after) == "new"


def test_a_task_running_across_a_reload_can_still_be_canceled(server: Server) -> None:
    started = server.send("sleeper", "nap", immediately=True)
    eventually(lambda: "nap" in str(server.get_task("sleeper", started["id"])["status"].get("message")), "the nap")
    save(server.root / "agents/sleeper.yaml", sleeper("Sleeps v3", "newer"), atomic=False)
    eventually(lambda: server.description("sleeper") == "Sleeps v3", "the reload")

    canceled = server.rpc("CancelTask", {"id": started["id"]}, agent="sleeper")["result"]
    assert state(canceled) == "canceled"
    eventually(lambda: (server.root / "nap-interrupted").exists(), "the running tool to be stopped")
    assert state(server.get_task("sleeper", started["id"])) == "canceled"


def test_a_paused_task_resumes_on_the_version_current_when_the_decision_arrives(server: Server) -> None:
    path = server.root / "agents/gated.yaml"
    paused = server.send("gated", "go")
    assert state(paused) == "input_required"
    assert not (server.root / "gated.log").exists()

    save(path, gated("Gated v2", "done v2"), atomic=False)
    eventually(lambda: server.description("gated") == "Gated v2", "the reload")
    done = server.send("gated", "approve", context=paused["contextId"], task=paused["id"])
    assert done["id"] == paused["id"] and state(done) == "completed"
    assert reply(done) == "done v2"  # the resumed turn ran on the new version
    assert (server.root / "gated.log").read_text() == "hello\n"  # the approved call ran once


RSS_TOLERANCE_KIB = 4 * 1024
"""Allowed VmRSS growth between two measurements: allocator noise. Keeping each old bundle (cards,
handlers, compiled graphs) alive would cost ~750 KiB per reload for this project."""
FD_TOLERANCE = 2
"""Allowed growth in open file descriptors (a connection being opened or closed meanwhile)."""


def assert_no_growth(before: tuple[int, int], after: tuple[int, int], what: str) -> None:
    rss, fds = after[0] - before[0], after[1] - before[1]
    print(f"{what}: VmRSS {before[0]} -> {after[0]} KiB ({rss:+d}), open files {before[1]} -> {after[1]}")
    assert rss <= RSS_TOLERANCE_KIB, f"VmRSS grew by {rss} KiB over {what} ({before} -> {after})"
    assert fds <= FD_TOLERANCE, f"open files grew by {fds} over {what} ({before} -> {after})"


def test_fifty_rapid_saves_end_in_the_last_state_without_growth(server: Server) -> None:
    path = server.root / "agents/churn.yaml"

    def burst(round_: int) -> str:
        """50 saves with no pause, alternating contents and the two ways of saving."""
        for i in range(50):
            final = f"churn {round_}-{i}"
            save(path, talker(final, final if i % 2 else "other", name="churn"), atomic=i % 2 == 0)
        return final

    def settle(final: str) -> None:
        eventually(lambda: server.description("churn") == final, f"the last save ({final})")
        assert server.diagnostics()["errors"] == []
        assert reply(server.send("churn", "hi")) == final  # the card and the agent agree: one bundle

    settle(burst(0))  # warm-up: caches, imports, allocator arenas
    before = server.memory()
    settle(burst(1))
    after = server.memory()
    server.assert_alive()
    assert_no_growth(before, after, "50 rapid saves")

    # A burst coalesces into one or two reloads; a leak per reload shows over saves each reloaded.
    def one_by_one(round_: int) -> None:
        for i in range(50):
            text = f"churn {round_}/{i}"
            save(path, talker(text, text, name="churn"), atomic=i % 2 == 0)
            eventually(partial(lambda t: server.description("churn") == t, text), text)

    reloads = server.reloads()
    one_by_one(0)
    before = server.memory()
    one_by_one(1)
    after = server.memory()
    assert server.reloads() - reloads >= 100
    server.assert_alive()
    assert_no_growth(before, after, "50 saves, each reloaded")


def test_a_changed_python_tool_is_imported_again_and_a_broken_one_keeps_the_old(server: Server) -> None:
    path = server.root / "tools/version.py"
    assert tool_results(server.send("tooly", "which?")) == ["v1"]

    # Saves of the same size within the same second (their mtime is the same): Python's bytecode
    # cache would take the second file for the first one if the reload trusted it.
    second = float(int(time.time()))
    for version in ("v2", "v3"):
        count = server.reloads()
        save(path, version_tool("").replace("{V}", version), mtime=second)
        eventually(partial(lambda n: server.reloads() > n, count), f"a reload after the change to {version}")
        assert tool_results(server.send("tooly", "which?")) == [version]

    try:
        save(path, version_tool("raise RuntimeError('half-written')").replace("{V}", "v4"))
        [error] = eventually(lambda: server.diagnostics()["errors"], "the tool's import error in diagnostics")
        assert (error["file"], error["line"], error["column"]) == ("tools/version.py", 1, 1)
        assert "half-written" in error["message"]
        server.stderr_with("tools/version.py:1:1: error: importing python tool")
        assert tool_results(server.send("tooly", "which?")) == ["v3"]  # the last good version still runs
    finally:
        save(path, version_tool("").replace("{V}", "v5"), atomic=False)
    eventually(lambda: server.diagnostics()["errors"] == [], "diagnostics to clear")
    assert tool_results(server.send("tooly", "which?")) == ["v5"]


def test_a_fix_saved_while_a_tool_import_hangs_is_served_without_waiting_for_it(server: Server) -> None:
    """A reload compiling a tool whose import hangs is abandoned when the next save comes, and the
    hung import holds no lock the fixed version needs (before, the fix waited out the hang)."""
    path = server.root / "tools/version.py"
    hanging = server.root / "import-started"
    count = server.reloads()
    hang = f"import pathlib, time; pathlib.Path({str(hanging)!r}).write_text('x'); time.sleep(60)"
    save(path, version_tool(hang).replace("{V}", "hung"))
    eventually(hanging.exists, "the import that hangs to start")
    save(path, version_tool("").replace("{V}", "fixed"))
    eventually(lambda: server.reloads() > count, "the reload of the fix")
    assert tool_results(server.send("tooly", "which?")) == ["fixed"]
