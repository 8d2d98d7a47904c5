"""Review finding: clients grow ``ca_requests_total`` / ``ca_request_seconds`` label sets without bound.

``RequestMetrics`` (framework/protocols/a2a/request_metrics.py) folds only -32601/404/405 into
``unknown``. Everything else keeps a label made from what the client sent:

* under ``server.auth``, *unauthenticated* requests are refused 401 by AuthMiddleware (inside
  RequestMetrics) before routing, so each random path becomes its own ``GET /<path>`` label;
* the JSON-RPC method is the first ``"method": "..."`` anywhere in the body's first chunk, so a
  ``"method"`` key inside ``params`` (e.g. a message's free-form ``metadata``) names the label of
  a request that succeeds;
* REST paths under the SDK's tenant mount (``/rest/{tenant}/tasks``) answer 200 for any tenant.

Each new label is a counter and a 15-bucket histogram kept for the life of the process: memory
and scrape size grow with every distinct value an attacker sends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

CALLER = {"Authorization": "Bearer caller-secret-token"}
LEAD = {"Authorization": "Bearer lead-secret-token"}
ENV = {"CALLER_TOKEN": "caller-secret-token", "LEAD_TOKEN": "lead-secret-token"}
PROJECT = {
    "ca.yaml": """
        server:
          auth:
            credentials:
              - {name: someone, token_env: CALLER_TOKEN, roles: [caller]}
              - {name: lead, token_env: LEAD_TOKEN, roles: [caller, approver]}
    """,
    "agents/echo.yaml": "name: echo\n",
}
N = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    served = start_serve(write_project(tmp_path_factory.mktemp("cardinality"), PROJECT), env=ENV)
    try:
        yield served
    finally:
        served.stop()


def _series(server: ServerProcess) -> set[str]:
    text = httpx.get(f"{server.url}/metrics", headers=LEAD, timeout=30).text
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith("ca_requests_total{")}


def _grows(server: ServerProcess, send: object) -> int:
    before = _series(server)
    for _ in range(N):
        send(uuid.uuid4().hex)  # type: ignore[operator]
    return len(_series(server) - before)


def test_unauthenticated_requests_to_random_paths_add_no_labels(server: ServerProcess) -> None:
    grown = _grows(server, lambda tag: httpx.get(f"{server.url}/{tag}", timeout=30))
    assert grown <= 2, f"{N} unauthenticated requests to random paths added {grown} series"


def test_a_method_key_inside_params_does_not_name_the_label(server: ServerProcess) -> None:
    def send(tag: str) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "params": {"metadata": {"method": f"m{tag}"}}, "method": "ListTasks"}
        answer = server.post(body, path="/agents/echo/", headers=CALLER)
        assert answer.status_code == 200 and "result" in answer.json(), answer.text

    grown = _grows(server, send)
    assert grown <= 2, f"{N} successful ListTasks calls added {grown} series"


def test_rest_tenant_segments_add_no_labels(server: ServerProcess) -> None:
    def send(tag: str) -> None:
        answer = server.client.get(
            f"{server.url}/agents/echo/rest/t{tag}/tasks", headers={"A2A-Version": "1.0", **CALLER}
        )
        assert answer.status_code == 200, answer.text

    grown = _grows(server, send)
    assert grown <= 2, f"{N} REST ListTasks calls with random tenants added {grown} series"
