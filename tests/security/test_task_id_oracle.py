"""Review finding: the platform methods tell another caller's task from one that does not exist,
and accept id prefixes, so one caller can enumerate every other caller's task ids.

``Platform._task`` looks tasks up with ``TaskStore.get``, which matches a unique *prefix* of an id
and says "not found; `ca tasks list` shows the tasks of this project" for no task, "is ambiguous"
for two, while another caller's task is a bare "task ... not found". docs/a2a.md promises "another
caller's task is -32001 ... exactly as a task that does not exist, so task ids do not leak".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.a2a_peers import Json, result_of, user_message
from tests.conftest import SIDE_EFFECT, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

A = {"Authorization": "Bearer team-a-secret-token"}
B = {"X-API-Key": "team-b-secret-key"}
ENV = {"TEAM_A_TOKEN": "team-a-secret-token", "TEAM_B_KEY": "team-b-secret-key"}
PROJECT = {
    "ca.yaml": """
        server:
          auth:
            credentials:
              - {name: team-a, token_env: TEAM_A_TOKEN, roles: [caller]}
              - {name: team-b, api_key_env: TEAM_B_KEY, roles: [caller]}
    """,
    "tools/side.py": SIDE_EFFECT,
    "agents/writer.yaml": writer_agent(),
}
METHODS: list[tuple[str, Json]] = [
    ("budget/status", {}),
    ("approvals/decide", {"decision": "approve"}),
    ("audit/query", {}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    served = start_serve(write_project(tmp_path_factory.mktemp("oracle"), PROJECT), env=ENV)
    try:
        yield served
    finally:
        served.stop()


def _error(server: ServerProcess, method: str, params: Json, task_id: str) -> Json:
    answer = server.rpc(f"_cleveragents/{method}", {**params, "taskId": task_id}, agent="writer", headers=B)
    assert "error" in answer, answer
    error: Json = answer["error"]
    return {"code": error["code"], "message": error["message"].replace(repr(task_id), "ID")}


@pytest.mark.parametrize(("method", "params"), METHODS, ids=[m for m, _ in METHODS])
def test_another_caller_s_task_answers_exactly_as_a_task_that_does_not_exist(
    server: ServerProcess, method: str, params: Json
) -> None:
    theirs = result_of(server.rpc("SendMessage", {"message": user_message("write it")}, agent="writer", headers=A))
    task_id = theirs["task"]["id"]
    nothing = _error(server, method, params, str(uuid.uuid4()))
    assert _error(server, method, params, task_id) == nothing
    # Nor does a prefix of it tell B anything (TaskStore.get matches unique prefixes).
    unused_prefix = next(p for p in "0123456789abcdef" if not task_id.startswith(p)) + task_id[1:8]
    assert _error(server, method, params, task_id[:8]) == _error(server, method, params, unused_prefix)
