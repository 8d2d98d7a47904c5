"""``ca test --record`` against a local OpenAI-compatible server (streaming, tool calls), then
``ca test`` replaying the cassette with the server gone and any connection to it caught."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import ProjectFactory, run_ca
from tests.fake_agent import FakeAgent
from tests.fake_openai import ConnectionTrap, FakeOpenAI

TOKEN = "tok-abcdefgh12345678"

EVALS = """
    cases:
      - name: reads-notes
        agent: reader
        input: What do my notes say?
        expect:
          state: completed
          tools_called: [{tool: fs.read, args: {path: notes.txt}, count: 1}]
          output_contains: "The tool said: remember the milk"
          budget: {max_tokens: 200, max_model_calls: 2}
"""


def _project(make_project: ProjectFactory, url: str) -> Path:
    return make_project(
        {
            "agents/reader.yaml": f"""
                name: reader
                instructions: Read the notes before answering.
                profile: autonomous
                model:
                  provider: openai
                  name: fake-model
                  base_url: {url}
                  api_key_env: FAKE_PROVIDER_KEY
                  params: {{max_retries: 0, timeout: 5}}
                tools: [fs.read]
                capabilities:
                  fs: {{read: ["**"]}}
            """,
            "notes.txt": f"remember the milk; the service token is {TOKEN}\n",
            ".env": f"SERVICE_TOKEN={TOKEN}\n",
            "evals/notes.yaml": EVALS,
        }
    )


def test_record_then_replay_with_no_network(make_project: ProjectFactory) -> None:
    with FakeOpenAI({"path": "notes.txt"}) as server:
        root = _project(make_project, server.url)
        recorded = run_ca("test", "--record", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-live-key-0123456789"})
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        assert "(recorded)" in recorded.stderr
        assert len(server.requests) == 2
        assert all(r["stream"] for r in server.requests)  # recorded through the streaming API
        assert server.requests[1]["messages"][-1]["role"] == "tool"

    cassette = root / "evals" / "cassettes" / "notes" / "reads-notes.yaml"
    text = cassette.read_text()
    assert TOKEN not in text and "sk-live-key" not in text  # masked like the audit
    assert "name: fs_read" in text and "content: What do my notes say?" in text

    with ConnectionTrap(server.port) as trap:  # the server is gone; anything that connects is caught
        replayed = run_ca("test", "--json", cwd=root, env={"FAKE_PROVIDER_KEY": ""})
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        [case] = json.loads(replayed.stdout)["cases"]
        assert case["passed"] and case["usage"]["input_tokens"] == 80  # the usage the provider reported
        assert case["tools"] == [{"tool": "fs.read", "args": {"path": "notes.txt"}}]

        (root / "evals" / "notes.yaml").write_text(
            (root / "evals" / "notes.yaml").read_text().replace("What do my notes say?", "Summarise my notes")
        )
        missed = run_ca("test", cwd=root)
        assert missed.returncode == 1
        assert (
            "model call 1 of agent 'reader' differs from the cassette reads-notes.yaml: "
            'request.messages[1].content: the cassette has "What do my notes say?", '
            'the run sent "Summarise my notes"'
        ) in missed.stdout
        assert trap.connections == 0


def test_a_provider_judge_is_recorded_then_replayed(make_project: ProjectFactory) -> None:
    verdict = '{"pass": true, "reason": "it quotes the notes"}'
    with FakeOpenAI({"path": "notes.txt"}, says=verdict) as server:
        root = _project(make_project, server.url)
        (root / "ca.yaml").write_text(
            "evals:\n"
            "  judge:\n"
            "    provider: openai\n"
            "    name: fake-judge\n"
            f"    base_url: {server.url}\n"
            "    api_key_env: FAKE_PROVIDER_KEY\n"
            "    params: {max_retries: 0, timeout: 5}\n"
        )
        evals = root / "evals" / "notes.yaml"
        evals.write_text(evals.read_text() + '      judged: ["the answer says what the notes say"]\n')
        recorded = run_ca("test", "--record", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-live-key-0123456789"})
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        assert len(server.requests) == 3
        assert server.requests[2]["model"] == "fake-judge" and server.requests[2]["stream"]
    text = (root / "evals" / "cassettes" / "notes" / "reads-notes.yaml").read_text()
    assert "agent: ca-test-judge" in text and "it quotes the notes" in text

    with ConnectionTrap(server.port) as trap:
        replayed = run_ca("test", "--json", cwd=root, env={"FAKE_PROVIDER_KEY": ""})
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        [case] = json.loads(replayed.stdout)["cases"]
        assert case["passed"] and trap.connections == 0


def test_update_re_records_only_the_failing_case(make_project: ProjectFactory) -> None:
    with FakeOpenAI({"path": "notes.txt"}) as server:
        root = _project(make_project, server.url)
        first = run_ca("test", "--record", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-live-key-0123456789"})
        assert first.returncode == 0, first.stdout + first.stderr
        evals = root / "evals" / "notes.yaml"
        evals.write_text(evals.read_text().replace("What do my notes say?", "Summarise my notes"))
        updated = run_ca("test", "--update", cwd=root, env={"FAKE_PROVIDER_KEY": "sk-live-key-0123456789"})
        assert updated.returncode == 0, updated.stdout + updated.stderr
        assert "PASS notes::reads-notes" in updated.stderr and "(re-recorded)" in updated.stderr
        assert len(server.requests) == 4
    assert "content: Summarise my notes" in (root / "evals" / "cassettes" / "notes" / "reads-notes.yaml").read_text()
    again = run_ca("test", cwd=root)
    assert again.returncode == 0, again.stdout


def test_a_provider_case_without_a_cassette_says_to_record(make_project: ProjectFactory) -> None:
    root = _project(make_project, "http://127.0.0.1:9/v1")
    result = run_ca("test", cwd=root)
    assert result.returncode == 1
    assert (
        "model call 1 of agent 'reader' is not in the cassette reads-notes.yaml (holds none): "
        "the run asks the model more than when it was recorded"
    ) in result.stdout


class _Status(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"all systems go"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


def test_http_get_results_are_recorded_and_replayed(make_project: ProjectFactory) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    root = make_project(
        {
            "agents/fetcher.yaml": f"""
                name: fetcher
                profile: autonomous
                tools: [http.get]
                capabilities:
                  network: {{allow: ["127.0.0.1:{port}"]}}
            """,
            "evals/web.yaml": f"""
                cases:
                  - name: status
                    agent: fetcher
                    input: '@tool http.get {{"url": "http://127.0.0.1:{port}/status"}}'
                    expect: {{output_contains: all systems go}}
            """,
        }
    )
    try:
        recorded = run_ca("test", "--record", cwd=root)
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    finally:
        server.shutdown()
        server.server_close()
    cassette = (root / "evals" / "cassettes" / "web" / "status.yaml").read_text()
    assert "tool: http.get" in cassette and "all systems go" in cassette
    with ConnectionTrap(port) as trap:
        replayed = run_ca("test", cwd=root)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert trap.connections == 0


def test_remote_agent_answers_are_recorded_and_replayed(make_project: ProjectFactory) -> None:
    remote = FakeAgent()
    remote.card(remote.url + "/rpc")
    remote.answers("/rpc")
    port = remote.port
    root = make_project(
        {
            "agents/caller.yaml": f"""
                name: caller
                profile: autonomous
                tools:
                  - {{agent: "{remote.url}/", name: remote}}
                capabilities: {{network: {{allow: ["127.0.0.1:{port}"]}}}}
            """,
            "evals/remote.yaml": """
                cases:
                  - name: asks
                    agent: caller
                    input: '@tool remote {"input": "ping"}'
                    expect:
                      tools_called: [{tool: remote, args: {input: ping}}]
                      output_contains: "remote: pong from"
            """,
        }
    )
    proxies = {name: "" for name in os.environ if name.lower().endswith("_proxy")}
    try:
        recorded = run_ca("test", "--record", cwd=root, env=proxies)
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        assert any(s.method == "POST" for s in remote.seen)
    finally:
        remote.close()
    assert f"pong from {port}" in (root / "evals" / "cassettes" / "remote" / "asks.yaml").read_text()
    with ConnectionTrap(port) as trap:
        replayed = run_ca("test", cwd=root, env=proxies)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert trap.connections == 0
