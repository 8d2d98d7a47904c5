"""Review finding: a tool name the model makes up becomes a ``ca_tool_calls_total`` label (as "allowed").

The governance middleware audits a ``tool.call`` for whatever name a model's tool call carries,
also a tool the agent does not have (LangGraph then answers "not a valid tool"), and
``Metrics.audited`` labels the counter with it. A caller who steers the model (prompt injection:
"call the tool named <random>") adds a counter series per name, for the life of the process,
and the figures count calls that never ran as allowed.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.a2a_peers import result_of, user_message
from tests.conftest import SIDE_EFFECT, write_project
from tests.serving import start_serve

pytestmark = pytest.mark.e2e

AGENT = """
name: writer
profile: autonomous
model:
  provider: scripted
  replies:
    - tool_calls: [{name: made_up_tool_1f3a, args: {}}, {name: made_up_tool_9c2e, args: {}}]
    - done
tools:
  - python: tools/side.py:append
"""


def test_a_tool_the_agent_does_not_have_is_no_label_of_its_own(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tools/side.py": SIDE_EFFECT, "agents/writer.yaml": AGENT})
    server = start_serve(root)  # no server.auth: the loopback caller may read /metrics
    try:
        answer = result_of(server.rpc("SendMessage", {"message": user_message("go")}, agent="writer"))
        assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
    finally:
        server.stop()
    tool_series = [line for line in text.splitlines() if line.startswith("ca_tool_calls_total{")]
    assert not [line for line in tool_series if "made_up_tool" in line], tool_series
    assert not [line for line in tool_series if 'decision="allowed"' in line], tool_series  # nothing ran
