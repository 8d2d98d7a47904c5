"""What one model call costs on our side of the wire, by the length of the conversation and of the answer.

    python bench/model_call.py [--calls 200] [--turns 0,5,20] [--words 4,200]

A model on the OpenAI SDK as ``ca`` builds it (``provider: openai``, langchain-openai), its HTTP
client answering at once in process (an httpx ``MockTransport`` of the SDK's httpx, streaming an
answer of --words words, one chunk each, as OpenAI does), so only the client side is measured: langchain-openai building the
request, the SDK preparing and sending it, reading the stream, langchain's message back. The
conversation is a system message, ``--turns`` earlier turns (a question, a tool call, its result
and an answer: 4 messages each) and a last question, with 5 tools bound. Each figure is the CPU
time per ``ainvoke`` (mean of --calls, after 20 warm-up calls), for the model as ``ca`` builds it
and for the same model with the SDK's own chat completions resource, which walks ``messages``
and ``tools`` against their declared types before sending them and builds a model of each chunk
of the answer by a walk of the same kind (see ``framework/compiler/model_http.py``); both send
the same JSON body and read the same answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


HEADINGS = (("messages", 8), ("chunks", 6), ("as ca builds it", 18), ("SDK's own resource", 18))


def answer(words: int) -> list[str]:
    return [f"word{i} " for i in range(words - 1)] + ["milk."]


def stream_body(words: list[str]) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return f"data: {json.dumps(body)}\n\n"

    parts = [chunk({"role": "assistant", "content": ""})]
    parts += [chunk({"content": word}) for word in words]
    parts.append(chunk({}, "stop"))
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


def conversation(turns: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    messages: list[Any] = [SystemMessage("Be brief; read what you are asked about.")]
    for i in range(turns):
        call = {"name": "fs_read", "args": {"path": f"notes-{i}.txt"}, "id": f"call_{i}"}
        messages += [
            HumanMessage(f"What do the notes of day {i} say?"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f"day {i}: remember the milk", tool_call_id=f"call_{i}"),
            AIMessage(f"Day {i}'s notes say: remember the milk."),
        ]
    messages.append(HumanMessage("And today?"))
    return messages


def tools() -> list[dict[str, Any]]:
    def tool(name: str) -> dict[str, Any]:
        parameters = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        return {
            "type": "function",
            "function": {"name": name, "description": f"{name} a file.", "parameters": parameters},
        }

    return [tool(name) for name in ("fs_read", "fs_write", "fs_list", "fs_glob", "fs_stat")]


def models(words: list[str]) -> dict[str, Any]:
    """The model as ca builds it, and the same with the SDK's own resource, answering ``words``."""
    from framework.compiler.model_http import sdk_httpx
    from framework.compiler.models import build_model
    from framework.spec.model import ModelConfig

    httpx = sdk_httpx()
    body = stream_body(words)

    def answer(request: Any) -> Any:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    params = {"http_async_client": client, "max_retries": 0}
    config = ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:9/v1", params=params)
    built = build_model(config, agent="bench", environ={})
    sdk_own = built.model_copy(update={"async_client": built.async_client._resource})  # type: ignore[attr-defined]
    return {"as ca builds it": built, "SDK's own resource": sdk_own}


async def per_call(model: Any, messages: list[Any], calls: int, words: list[str]) -> float:
    """CPU milliseconds per call."""
    bound = model.bind_tools(tools())
    for _ in range(20):
        await bound.ainvoke(messages)
    start = time.process_time()
    for _ in range(calls):
        reply = await bound.ainvoke(messages)
    elapsed = time.process_time() - start
    if str(reply.content) != "".join(words):
        sys.exit(f"unexpected answer: {reply.content!r}")
    return elapsed / calls * 1000


async def measure(turns: list[int], lengths: list[int], calls: int) -> None:
    print(f"CPU per model call (OpenAI SDK, in-process answer, 5 tools bound; mean of {calls} calls)")
    print("  " + "  ".join(f"{name:>{width}}" for name, width in HEADINGS))
    for length in lengths:
        words = answer(length)
        variants = models(words)
        for count in turns:
            messages = conversation(count)
            figures = [await per_call(model, messages, calls, words) for model in variants.values()]
            print(f"  {len(messages):>8}  {length:>6}  " + "  ".join(f"{ms:>15.2f} ms" for ms in figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="measured calls per variant and length")
    parser.add_argument("--turns", default="0,5,20", help="earlier turns in the conversation, comma-separated")
    parser.add_argument("--words", default="4,200", help="words (chunks) of the answer, comma-separated")
    args = parser.parse_args()
    numbers = {}
    for option in ("turns", "words"):
        text = getattr(args, option)
        try:
            numbers[option] = [int(part) for part in text.split(",")]
        except ValueError:
            sys.exit(f"--{option} must be whole numbers separated by commas, not {text!r}")
    if args.calls < 1 or min(numbers["turns"]) < 0 or min(numbers["words"]) < 1:
        sys.exit("--calls and --words must be at least 1, --turns at least 0")
    asyncio.run(measure(numbers["turns"], numbers["words"], args.calls))


if __name__ == "__main__":
    main()
