"""Known secrets never leave the process: every byte a client got, and every file under .ca/, is searched.

The secrets are a ``.env`` value interpolated into the agent, a ``.env`` value nobody
interpolates, a provider key in the environment and a ``server.auth`` token. They come back
out the ways a real run would bring them: the user pastes one, a file the agent reads holds
one, a tool's error message quotes one. One more ``.env`` value is several words, which the
offline model streams a word at a time (as a model streams tokens): every client reads the text
it was streamed joined, and a secret split over chunks counts as reached.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import httpx

from tests.conftest import CA, REPO, ProjectFactory, run_ca
from tests.serving import start_serve

INTERPOLATED = "tok-interp-93f1a7c2"
DOTENV_ONLY = "pw-dotenv-5be0d411"
PROVIDER = "sk-provider-0d9e8c7b6a5f4e3d"
AUTH = "bearer-auth-77aa66bb55cc"
SPLIT = "correct horse battery staple"
SECRETS = (INTERPOLATED, DOTENV_ONLY, PROVIDER, AUTH, SPLIT)
ENV = {"OPENAI_API_KEY": PROVIDER, "CA_TEST_AUTH_TOKENS": AUTH}

PROMPT = (
    f"mine are {INTERPOLATED} and {DOTENV_ONLY} and {PROVIDER} and {AUTH} and {SPLIT}\n"
    '@tool fs.read {"path": "notes.txt"}\n'
    f'@tool fs.read {{"path": "{DOTENV_ONLY}.txt"}}'
)

FROM_FILE = '@tool fs.read {"path": "notes.txt"}'
"""A prompt that names no secret: they come back in the tool's result (the client's own message is
echoed in an A2A task's history, so a pasted secret would come back to the client that sent it)."""


def _project(make_project: ProjectFactory) -> Path:
    return make_project(
        {
            ".env": f"DEPLOY_TOKEN={INTERPOLATED}\nDB_PASSWORD={DOTENV_ONLY}\nDB_PASSPHRASE={SPLIT}\n",
            "notes.txt": f"the deploy token is {INTERPOLATED}; the key is {PROVIDER}\n{DOTENV_ONLY} {AUTH} {SPLIT}\n",
            "agents/keeper.yaml": """
                name: keeper
                instructions: "Deploy with ${DEPLOY_TOKEN}."
                profile: autonomous
                tools: [fs.read]
                capabilities: {fs: {read: ["**"]}}
            """,
            "ca.yaml": "default_agent: keeper\nserver:\n  auth: {bearer_tokens_env: CA_TEST_AUTH_TOKENS}\n",
        }
    )


def _assert_nowhere(text: str, where: str) -> None:
    streamed = "".join(_texts(text))
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} reached {where}"
        assert secret not in streamed, f"{secret!r} reached {where}, split over the chunks of a stream"


def _texts(received: str) -> list[str]:
    """Every ``text`` of every JSON message in ``received`` (lines, SSE ``data:`` lines), in order."""
    found: list[str] = []

    def walk(item: object) -> None:
        if isinstance(item, dict):
            for key, value in item.items():
                found.append(value) if key == "text" and isinstance(value, str) else walk(value)
        elif isinstance(item, list):
            for value in item:
                walk(value)

    for line in received.splitlines():
        body = line.removeprefix("data:").strip()
        if body.startswith("{"):
            try:
                walk(json.loads(body))
            except ValueError:
                continue  # a line of a log, not a message
    return found


def _assert_not_stored(root: Path) -> None:
    files = [path for path in (root / ".ca").rglob("*") if path.is_file()]
    assert any(path.name.startswith("conversations.db") for path in files)
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret!r} is stored in {path.relative_to(root)}"


def test_the_terminal_json_events_and_every_store_mask_known_secrets(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    plain = run_ca("run", "keeper", PROMPT, cwd=root, env=ENV)
    assert plain.returncode == 0, plain.stderr
    assert "***" in plain.stdout
    _assert_nowhere(plain.stdout + plain.stderr, "ca run")
    as_json = run_ca("run", "keeper", PROMPT, "--json", cwd=root, env=ENV)
    _assert_nowhere(as_json.stdout + as_json.stderr, "ca run --json")
    results = [json.loads(line) for line in as_json.stdout.splitlines() if '"tool_result"' in line]
    assert results and "the deploy token is ***; the key is ***" in results[0]["result"]
    assert "no such file: '***.txt'" in results[1]["result"]
    listed = run_ca("tasks", "list", cwd=root, env=ENV)
    audit = run_ca("audit", cwd=root, env=ENV)
    _assert_nowhere(listed.stdout + audit.stdout, "ca tasks list / ca audit")
    _assert_not_stored(root)


def test_a2a_answers_streams_and_task_rows_mask_known_secrets(make_project: ProjectFactory, tmp_path: Path) -> None:
    root = _project(make_project)
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs, env=ENV)
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {AUTH}"}
    received = ""
    try:
        for method in ("SendMessage", "SendStreamingMessage"):
            message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": FROM_FILE}]}
            request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
            with httpx.stream("POST", f"{server.url}/agents/keeper/", json=request, headers=headers, timeout=60) as r:
                assert r.status_code == 200
                received += "".join(r.iter_text())
        task_ids = {line.split('"id":"', 1)[1].split('"', 1)[0] for line in received.split("\n") if '"id":"' in line}
        for task_id in task_ids:
            get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
            received += httpx.post(f"{server.url}/agents/keeper/", json=get, headers=headers, timeout=30).text
    finally:
        server.stop()
    assert "***" in received
    _assert_nowhere(received, "the A2A client")
    _assert_nowhere(server.stderr(), "the server's log")
    _assert_not_stored(root)


def test_acp_updates_and_session_load_mask_known_secrets(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(root), "mcpServers": []}},
    ]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **ENV}
    proc = subprocess.Popen(
        [*CA, "run", "--stdio"], cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen = ""
    for line in lines:
        proc.stdin.write(json.dumps(line) + "\n")
        proc.stdin.flush()
        while f'"id": {line["id"]}' not in (answer := proc.stdout.readline()) and f'"id":{line["id"]}' not in answer:
            seen += answer
        seen += answer
    session = json.loads(answer)["result"]["sessionId"]
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": PROMPT}]}
    load = {"sessionId": session, "cwd": str(root), "mcpServers": []}
    for number, (method, params) in enumerate((("session/prompt", prompt), ("session/load", load)), start=3):
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        while True:
            answer = proc.stdout.readline()
            assert answer, "the agent closed its output"
            seen += answer
            message = json.loads(answer)
            if message.get("id") == number and "method" not in message:
                break
    proc.stdin.close()
    proc.wait(timeout=30)
    assert "***" in seen and "session/update" in seen
    _assert_nowhere(seen, "the ACP client")
    _assert_not_stored(root)
