"""Property-based fuzzing of every wire: HTTP JSON-RPC and REST on a real `ca serve`, A2A and ACP
on a real `ca run --stdio`, with bounded, derandomized hypothesis runs (well under a minute).

Each generated message is a JSON-RPC request built from hostile parts (ids of every JSON type,
numbers out of range, lone surrogates, 1000-deep nesting, invalid UTF-8, raw bytes, real and
made-up methods, real and broken params). What the answer must be is worked out here from the
JSON-RPC 2.0 rules, independently of the server's code:

* text that is not UTF-8 or not JSON: -32700 with id null;
* not a request object, or an id that is not a string or an integer: -32600, id null unless valid;
* no ``id`` member: no answer at all (HTTP 204, nothing on stdout);
* otherwise an answer with the request's id, never -32603, and -32602 when params hold a value
  that could not be stored (a non-finite number, an integer beyond ±2**53, a lone surrogate).

And throughout: no HTTP 5xx, no traceback in the server's log, reads work afterwards, and the
process's memory stays bounded.
"""

from __future__ import annotations

import itertools
import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.a2a_peers import Json, StdioPeer, result_of, user_message
from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

PROJECT = {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"}
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found, within CI's time
)
RSS_GROWTH_MIB = 64
"""How much a process's resident memory may grow over one fuzz run."""

ALLOWED_CODES = {-32700, -32600, -32601, -32602, *range(-32009, -32000), *range(-32091, -32079)}
"""Every error code a malformed request may get: JSON-RPC's own, A2A's, ours. Not -32603."""


# -- building hostile messages ----------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text put into a message verbatim (what ``json.dumps`` would never write)."""

    text: str


class Big:
    """An integer literal of more digits than Python converts (the oracle's view of it)."""


HOSTILE = [
    Raw("1e999"),
    Raw("-1e999"),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("9" * 4301),
    Raw(str(2**60)),
    Raw('"\\ud800"'),
    Raw('"\\udfff tail"'),
    Raw("[" * 1000 + "]" * 1000),
]
METHODS = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "GetExtendedAgentCard",
    "message/send",
    "tasks/get",
    "tasks/cancel",
    "_cleveragents/diagnostics",
    "_cleveragents/audit/query",
    "_cleveragents/budget/status",
    "_cleveragents/approvals/list",
    "agent/discover",
    "initialize",
    "session/new",
    "session/prompt",
    "session/set_mode",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(HOSTILE),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
parts = st.one_of(
    st.builds(lambda t: {"text": t}, st.text(max_size=30)),
    st.builds(lambda v: {"data": {"v": v}}, values),
    values,
)
messages = st.builds(
    lambda text, extra, role: {**user_message(text), "role": role, "parts": [{"text": text}, *extra]},
    st.text(max_size=20),
    st.lists(parts, max_size=2),
    st.sampled_from(["ROLE_USER", "user", "ROLE_AGENT", 7]),
)
params = st.one_of(
    st.builds(lambda m: {"message": m}, messages),
    st.builds(lambda m: {"message": {**m, "kind": "message"}}, messages),
    st.builds(lambda i: {"id": i}, st.one_of(st.text(max_size=8), values)),
    st.builds(lambda c: {"cwd": c, "mcpServers": []}, st.sampled_from(["/", "relative", ""])),
    st.dictionaries(st.text(max_size=8), values, max_size=3),
    values,
)
IdKind = str
id_kinds = st.sampled_from(
    ["absent", "string", "integer", "null", "true", "list", "object", "big", "surrogate", "float"]
)


@dataclass(frozen=True)
class Case:
    """One generated message: how to build it and whether to damage its bytes."""

    jsonrpc: Any
    id_kind: IdKind
    method: Any
    params: Any
    omit_params: bool
    damage: bytes | None
    raw: bytes | None


cases = st.builds(
    Case,
    jsonrpc=st.sampled_from(["2.0"] * 6 + ["1.0", 2, None]),
    id_kind=id_kinds,
    method=st.one_of(*[st.sampled_from(METHODS)] * 4, st.text(max_size=10), st.integers(), st.none()),
    params=params,
    omit_params=st.booleans(),
    damage=st.one_of(st.none(), st.none(), st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"{", b"\x00"])),
    raw=st.one_of(st.none(), st.none(), st.none(), st.binary(max_size=40)),
)


def sending(method: str, part: Any, role: str = "ROLE_USER") -> Case:
    """A well-formed send with one extra part: the cases that reach the agent and the stores."""
    message = {**user_message("fuzz"), "role": role}
    message["parts"] = [{"text": "fuzz"}, part] if role == "ROLE_USER" else [{"kind": "text", "text": "fuzz"}]
    return Case("2.0", "string", method, {"message": message}, omit_params=False, damage=None, raw=None)


def encode(value: Any) -> str:
    """JSON text of ``value``, with :class:`Raw` parts verbatim."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    return json.dumps(value)


ID_VALUES: dict[str, Any] = {
    "null": None,
    "true": True,
    "list": [1],
    "object": {"id": 1},
    "big": Raw("9" * 4301),
    "surrogate": Raw('"\\ud800"'),
    "float": 1.5,
}


def build(case: Case, fresh_id: Any) -> bytes:
    """The message's bytes (one line: no raw newline inside)."""
    if case.raw is not None:
        return case.raw.replace(b"\n", b" ").replace(b"\r", b" ")
    body: dict[str, Any] = {"jsonrpc": case.jsonrpc, "method": case.method}
    if case.id_kind in ("string", "integer"):
        body["id"] = fresh_id if case.id_kind == "string" else int(uuid.UUID(fresh_id).int % 10**12)
    elif case.id_kind != "absent":
        body["id"] = ID_VALUES[case.id_kind]
    if not case.omit_params:
        body["params"] = case.params
    data = encode(body).encode("utf-8", errors="surrogatepass")
    if case.damage is not None:
        middle = len(data) // 2
        data = data[:middle] + case.damage + data[middle:]
    return data


# -- the oracle ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    answered: bool
    """False for a notification (and for a blank line on stdio)."""
    code: int | None = None
    """The error code when the rules fix it (None: any allowed outcome)."""
    request_id: Any = None
    """The id the answer must carry."""


def _parse_constant(name: str) -> Any:
    raise ValueError(name)


def _parse_int(text: str) -> Any:
    return Big() if len(text.lstrip("-")) > 4300 else int(text)


def _loads(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"), parse_constant=_parse_constant, parse_int=_parse_int)


def _unicode(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _storable(value: Any) -> bool:
    if isinstance(value, Big):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= 2**53
    if isinstance(value, str):
        return _unicode(value)
    if isinstance(value, list):
        return all(_storable(v) for v in value)
    if isinstance(value, dict):
        return all(_unicode(k) and _storable(v) for k, v in value.items())
    return True


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and _unicode(value))


def expect(data: bytes, *, line: bool = False, responses_are_replies: bool = False) -> Expected:
    """What JSON-RPC 2.0 says the answer to ``data`` is (``line``: on stdio, where a blank line is
    skipped; ``responses_are_replies``: ACP, where a message with an id and no method is a reply to
    the agent's own request, never answered)."""
    if line and not data.strip():
        return Expected(answered=False)
    try:
        value = _loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Expected(True, -32700)
    if _depth(value) > 64:
        return Expected(True, -32700)
    if not isinstance(value, dict):
        return Expected(True, -32600)
    if responses_are_replies and "method" not in value and "id" in value:
        return Expected(answered=False)
    request_id = value.get("id")
    echo = request_id if _valid_id(request_id) else None
    if "id" in value and request_id is not None and not _valid_id(request_id):
        return Expected(True, -32600, None)
    if value.get("jsonrpc") != "2.0" or not isinstance(value.get("method"), str) or not _unicode(value["method"]):
        return Expected(True, -32600, echo)
    if "id" not in value:
        return Expected(answered=False)
    params = value.get("params")
    if params is not None and not isinstance(params, dict):
        return Expected(True, -32602, echo)
    if params is not None and not _storable(params):
        return Expected(True, -32602, echo)
    return Expected(True, None, echo)


def check_answer(answer: Json, expected: Expected) -> None:
    assert answer.get("jsonrpc") == "2.0", answer
    assert ("result" in answer) != ("error" in answer), answer
    assert answer.get("id") == expected.request_id, (answer, expected)
    if expected.code is not None:
        assert "error" in answer and answer["error"]["code"] == expected.code, (answer, expected)
    if "error" in answer:
        error = answer["error"]
        assert isinstance(error.get("message"), str) and error["code"] in ALLOWED_CODES, answer


# -- HTTP -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("fuzz"), PROJECT)


@pytest.fixture(scope="module")
def server(project: Path) -> Iterator[ServerProcess]:
    served: ServerProcess = start_serve(project)
    try:
        yield served
    finally:
        served.stop()


def test_fuzzed_json_rpc_and_rest_over_http(server: ServerProcess) -> None:
    good = result_of(server.rpc("SendMessage", {"message": user_message("before the fuzz")}))["task"]
    before = server.rss_mib()

    @FUZZ
    @given(
        case=cases,
        path=st.sampled_from(["/agents/echo/", "/", "/agents/echo", "/agents/nobody/"]),
        version=st.sampled_from([None, "1.0", "0.3", "x"]),
    )
    @example(case=sending("SendMessage", {"data": {"n": Raw("1e999")}}), path="/agents/echo/", version="1.0")
    @example(case=sending("SendMessage", {"text": "ok"}), path="/agents/echo", version="1.0")
    @example(case=sending("SendStreamingMessage", {"data": {"n": 1}}), path="/", version="1.0")
    @example(case=sending("message/send", {"text": "v0.3"}, role="user"), path="/agents/echo/", version=None)
    def json_rpc(case: Case, path: str, version: str | None) -> None:
        data = build(case, uuid.uuid4().hex)
        headers = {"content-type": "application/json", **({"A2A-Version": version} if version else {})}
        response = server.client.post(server.url + path, content=data, headers=headers)
        assert response.status_code < 500, (response.status_code, response.text[:300], data[:300])
        expected = expect(data)
        if not expected.answered:
            assert response.status_code == 204 and response.content == b"", (response.text[:300], data[:300])
            return
        assert response.status_code in ((200, 404) if "nobody" in path else (200,)), response.text[:300]
        if response.headers["content-type"].startswith("text/event-stream"):  # a stream: every event answers
            events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
            assert events, response.text[:300]
            for event in events:
                check_answer(event, expected)
            return
        check_answer(response.json(), expected)

    @FUZZ
    @given(case=cases, version=st.sampled_from([None, "1.0", "0.3"]))
    def rest(case: Case, version: str | None) -> None:
        data = (
            build(case, "x")
            if case.raw is not None
            else encode({"message": case.params}).encode(errors="surrogatepass")
        )
        headers = {"content-type": "application/json", **({"A2A-Version": version} if version else {})}
        response = server.client.post(server.url + "/agents/echo/rest/message:send", content=data, headers=headers)
        assert response.status_code < 500, (response.status_code, response.text[:300], data[:300])
        body = response.json()
        if response.status_code >= 400:
            error = body["error"]
            assert error["code"] == response.status_code and isinstance(error["status"], str), body
            assert isinstance(error["message"], str) and "\n" not in error["message"], body

    json_rpc()
    rest()
    task = result_of(server.rpc("GetTask", {"id": good["id"]}))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert result_of(server.rpc("ListTasks", {}))["tasks"]
    assert server.rss_mib() - before < RSS_GROWTH_MIB
    server.assert_alive()
    assert "Traceback" not in server.stderr(), server.stderr()[-5000:]


# -- stdio ------------------------------------------------------------------------------------------


def drive(peer: StdioPeer, data: bytes, expected: Expected, probe: str) -> None:
    """Send one fuzzed line and a probe request after it: what came back in between must fit."""
    peer.send_raw(data + b"\n")
    peer.send(
        {"jsonrpc": "2.0", "id": probe, "method": "agent/discover" if "a2a" in probe else "initialize", "params": {}}
    )
    peer.answer(probe)
    if not expected.answered:
        stray = [m for m in peer._inbox if "method" not in m]
        assert not stray, (stray, data[:300])
        peer._inbox.clear()
        return
    if expected.request_id is None:
        answer = peer.wait_for(lambda m: "method" not in m and m.get("id") is None, timeout=30)
    else:
        answer = peer.answer(expected.request_id, timeout=60)
    check_answer(answer, expected)
    peer._inbox = [m for m in peer._inbox if "method" not in m]  # stream notifications and session updates


@pytest.mark.parametrize("protocol", ["a2a", "acp"])
def test_fuzzed_lines_on_stdio(project: Path, protocol: str) -> None:
    peer = StdioPeer(project)
    counter = itertools.count()
    try:
        if protocol == "acp":
            peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": "hello",
                    "method": "initialize",
                    "params": {"protocolVersion": 1, "clientCapabilities": {}},
                }
            )
            peer.answer("hello")
            assert "sessionId" in result_of(peer.request("session/new", {"cwd": str(project), "mcpServers": []}))
        else:
            result_of(peer.request("SendMessage", {"message": user_message("before the fuzz")}))
        before = peer.rss_mib()

        @FUZZ
        @given(case=cases)
        @example(case=sending("SendMessage", {"data": {"n": Raw("-1e999")}}))
        @example(case=sending("SendStreamingMessage", {"text": "ok"}))
        @example(case=sending("session/prompt", {"text": "ok"}))
        def line(case: Case) -> None:
            if case.id_kind == "null":  # an id null answer is indistinguishable from a refusal's here
                return
            data = build(case, uuid.uuid4().hex)
            expected = expect(data, line=True, responses_are_replies=protocol == "acp")
            drive(peer, data, expected, f"probe-{protocol}-{next(counter)}")

        line()
        if protocol == "a2a":
            assert result_of(peer.request("ListTasks", {}))["tasks"]
        else:
            session = {"cwd": str(project), "mcpServers": []}
            assert "sessionId" in result_of(peer.request("session/new", session))
        assert peer.rss_mib() - before < RSS_GROWTH_MIB
        code, _rest = peer.close()
        assert code == 0, peer.stderr()[-3000:]
        assert "Traceback" not in peer.stderr(), peer.stderr()[-5000:]
    finally:
        peer.kill()
