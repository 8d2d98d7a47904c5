"""Review finding: a secret whose value JSON escapes (a quote, a backslash, a newline as in a PEM key)
is exported unmasked in ``gen_ai.tool.call.arguments`` when message content capture is on.

``telemetry._content`` serialises the tool's arguments to JSON first and masks the JSON text
afterwards, so the secret appears in its escaped form (``\\"``, ``\\\\``, ``\\n``), which the mask's
regex of the raw value never matches. The audit masks values before serialising (``KNOWN.value``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from framework.runtime import telemetry
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import SIDE_EFFECT, write_project

SECRETS = {
    "plain": "plainsecretvalue123",
    "quote": 'hunter"2-very-secret',
    "backslash": "C:\\vault\\s3cr3t-value",
    "newline": "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----",
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.install(provider, contents=True)  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
    yield exporter
    telemetry.uninstall()


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_secret_that_json_escapes_is_masked_in_captured_tool_arguments(
    kind: str, tmp_path: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = SECRETS[kind]
    monkeypatch.setenv("REVIEW_DB_PASSWORD", secret)  # a secret-looking variable: KNOWN masks it
    args = json.dumps({"file": str(tmp_path / "effects.log"), "text": secret})  # JSON is YAML
    write_project(
        tmp_path,
        {
            "tools/side.py": SIDE_EFFECT,
            "agents/writer.yaml": f"""
                name: writer
                profile: autonomous
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{{name: append, args: {args}}}]
                    - done
                tools:
                  - python: tools/side.py:append
            """,
        },
    )

    async def main() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(tmp_path), source="cli", stack=stack)
            [_ async for _ in runtime.send("writer", "write it", conversation=uuid.uuid4().hex)]

    asyncio.run(main())
    [tool] = [s for s in spans.get_finished_spans() if s.name == "execute_tool append"]
    assert tool.attributes is not None
    captured = str(tool.attributes["gen_ai.tool.call.arguments"])
    assert "***" in captured, captured  # masked ...
    escaped = json.dumps(secret)[1:-1]  # ... in neither form
    assert secret not in captured and escaped not in captured, captured
