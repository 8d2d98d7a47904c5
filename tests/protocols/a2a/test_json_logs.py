"""``--log-format json`` / ``CA_LOG_FORMAT=json``: `ca serve` and `ca run --stdio` write one JSON
object per stderr line, carrying the ids of the task each record belongs to (and its trace id
when tracing is on); secrets stay masked; the default stays human."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from framework.runtime.governance.secrets import KNOWN, mask_logs
from framework.runtime.logs import JsonFormatter, bind
from tests.a2a_peers import StdioPeer, result_of, user_message
from tests.acp_client import Raw, agent_env, initialize_params
from tests.conftest import run_ca, write_project
from tests.otlp import otlp_receiver, traced_env
from tests.serving import start_serve

PROJECT = {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"}


def _records(stderr: str) -> list[dict[str, Any]]:
    """Every line of ``stderr`` as JSON: a line that is not one fails the test."""
    records = []
    for line in stderr.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a stderr line is not JSON: {line!r}\n--- stderr\n{stderr}")
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys(), record
    return records


def _of_task(records: list[dict[str, Any]], task_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("task_id") == task_id]


def _send(text: str, context_id: str) -> dict[str, Any]:
    return {"message": user_message(text, contextId=context_id)}


@pytest.mark.e2e
def test_ca_serve_logs_json_lines_with_the_ids_of_the_task(tmp_path: Path) -> None:
    server = start_serve(write_project(tmp_path, PROJECT), "--log-format", "json")
    context_id = f"ctx-{uuid.uuid4().hex[:8]}"
    try:
        task = result_of(server.rpc("SendMessage", _send("hello", context_id)))["task"]
    finally:
        server.stop()
    server.assert_clean_exit()
    mine = _of_task(_records(server.stderr()), task["id"])
    states = [r["message"] for r in mine if r["message"].startswith("task.state")]
    assert states == [
        "task.state state=submitted by=anonymous",
        "task.state state=working",
        "task.state state=completed",
    ]
    for record in mine:
        assert record["context_id"] == context_id and record["caller"] == "anonymous", record
        assert record["agent"] == "echo" and record["level"] == "info" and record["logger"] == "framework.audit"
        assert "trace_id" not in record  # tracing is off


@pytest.mark.e2e
def test_ca_run_stdio_logs_json_on_stderr_from_ca_log_format(tmp_path: Path) -> None:
    peer = StdioPeer(write_project(tmp_path, PROJECT), env={"CA_LOG_FORMAT": "json"})
    try:
        task = result_of(peer.request("SendMessage", _send("hello", "ctx-stdio")))["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        peer.send_raw(b'{"jsonrpc": "2.0", "id": "no-method"}\n')
        assert peer.answer("no-method")["error"]["code"] == -32600
        stderr = peer.stderr()  # the records are written before the answers
    finally:
        peer.kill()
    records = _records(stderr)
    mine = _of_task(records, task["id"])
    assert [r["message"] for r in mine][-1] == "task.state state=completed"
    assert all(r["context_id"] == "ctx-stdio" for r in mine), mine
    [refused] = [r for r in records if r["message"].startswith("refused a request: -32600")]
    assert refused["level"] == "warning" and refused["logger"] == "framework.protocols.a2a.stdio"


@pytest.mark.e2e
def test_an_acp_session_logs_json_with_its_session_as_the_context(tmp_path: Path) -> None:
    with Raw(write_project(tmp_path, PROJECT), "--log-format", "json", env=agent_env()) as raw:
        raw.answer(raw.request("initialize", initialize_params()))
        new = raw.answer(raw.request("session/new", {"cwd": str(raw.root), "mcpServers": []}), timeout=120)
        session = new["result"]["sessionId"]
        prompt = raw.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]})
        assert raw.answer(prompt, timeout=120)["result"]["stopReason"] == "end_turn"
        assert raw.close() == 0
        stderr = raw.stderr_text()
    states = [r for r in _records(stderr) if r["message"].startswith("task.state")]
    assert [r["message"] for r in states][-1] == "task.state state=completed"
    assert {(r["context_id"], r["agent"], r["caller"]) for r in states} == {(session, "echo", "acp")}


@pytest.mark.e2e
def test_with_tracing_on_each_record_of_a_run_carries_its_trace_id(tmp_path: Path) -> None:
    with otlp_receiver() as (endpoint, spans):
        server = start_serve(write_project(tmp_path, PROJECT), "--log-format", "json", env=traced_env(endpoint, "logs"))
        try:
            task = result_of(server.rpc("SendMessage", _send("hello", "ctx-traced")))["task"]
        finally:
            server.stop()
    [run] = [s for s in spans if s.name == "invoke_agent echo" and s.attributes.get("ca.task.id") == task["id"]]
    working = [r for r in _of_task(_records(server.stderr()), task["id"]) if r["message"] == "task.state state=working"]
    assert [r["trace_id"] for r in working] == [run.trace_id]


def test_a_bad_log_format_flag_is_one_line_and_exit_2() -> None:
    for command in (["serve"], ["run", "--stdio"]):
        done = run_ca(*command, "--log-format", "xml")
        assert done.returncode == 2
        assert "Invalid value for --log-format: 'xml' is not a log format: use human or json" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_bad_stdio_protocol_is_named() -> None:
    for given in (["--protocol", "foo"], ["--protocol=foo"]):
        done = run_ca("run", "--stdio", *given)
        assert done.returncode == 2
        assert "Invalid value for --protocol: 'foo' is not a protocol: use acp or a2a" in done.stderr


def test_secrets_in_a_record_are_masked_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    """The JSON path goes through the masking record factory, tracebacks included."""
    mask_logs()
    KNOWN.add(["s3cr3t-value-for-logs"])
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.json_logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        bind(task_id="t-1", caller="ops")
        try:
            raise RuntimeError("failed with s3cr3t-value-for-logs")
        except RuntimeError:
            logger.exception("token s3cr3t-value-for-logs refused")
    finally:
        logger.removeHandler(handler)
    [line] = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert "s3cr3t-value-for-logs" not in line
    assert record["level"] == "error" and record["task_id"] == "t-1" and record["caller"] == "ops"
    assert "RuntimeError" in record["exception"]
