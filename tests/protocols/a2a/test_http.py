"""`ca serve` end to end: the official a2a-sdk client against a real server process on loopback.

One server (one project, one subprocess) serves the whole module; every test uses its own
contexts, so the tests do not see each other's conversations. The restart test starts its own.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict, ParseDict

from tests.a2a_peers import a2a_client
from tests.conftest import NAP, SIDE_EFFECT, ProjectFactory, run_ca, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

T = TypeVar("T")

EXTENSION = "urn:cleveragents:extensions:v1"


PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",
    "agents/guide.yaml": """
        name: guide
        description: Shows the way
        skills:
          - {id: directions, name: Directions, description: How to get somewhere, tags: [travel, maps]}
    """,
    "agents/twice.yaml": """
        name: twice
        model:
          provider: scripted
          replies: ["first answer", "second answer"]
    """,
    "agents/slow.yaml": """
        name: slow
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 5}}]
            - rested enough
        tools:
          - python: tools/nap.py:nap
    """,
    "agents/approver.yaml": writer_agent("approver", "approved.log"),
    "agents/rejecter.yaml": writer_agent("rejecter", "rejected.log"),
    "agents/watched.yaml": writer_agent("watched", "watched.log"),
    "agents/broken.yaml": "name: broken\nmodel: anthropic:claude-sonnet-4-0\n",
    "agents/desk.yaml": """
        name: desk
        kind: workflow
        steps:
          - id: kind
            router:
              on: "{{ request.message_id }}"
              routes:
                - when: {regex: "^hello-"}
                  steps: [{id: hi, message: "Hello, {{ input }}"}]
                - when: {regex: "^files-"}
                  steps:
                    - id: bundle
                      artifact:
                        name: results
                        description: what was asked for
                        parts:
                          - {text: "for {{ request.metadata.team }}"}
                          - data: {asked: "{{ input }}", count: 3}
                          - file: {name: notes.txt, media_type: text/plain, content: "notes on {{ input }}"}
                          - file: {name: spec.pdf, media_type: application/pdf, url: "https://example.com/spec.pdf"}
              default:
                - id: order
                  loop:
                    steps: [{id: which, ask: {message: "Which order do you mean?"}}]
                    on: "{{ steps.which.output }}"
                    until: {regex: "^[0-9]+$"}
                    max: 5
        output: "{{ steps.kind.output }}"
    """,
    "tools/side.py": SIDE_EFFECT,
    "tools/nap.py": NAP,
}


# -- the server process -------------------------------------------------------------------


NO_KEY = {"ANTHROPIC_API_KEY": ""}
"""The server's environment: no provider key (its agents run the offline and scripted models)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = write_project(tmp_path_factory.mktemp("project"), PROJECT)
    srv = start_serve(root, logs=tmp_path_factory.mktemp("logs"), env=NO_KEY)
    try:
        yield srv
    finally:
        srv.stop()
    srv.assert_clean_exit()


# -- the client ---------------------------------------------------------------------------


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def user_message(*parts: Part | str, context_id: str = "", task_id: str = "") -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[new_text_part(p) if isinstance(p, str) else p for p in parts],
        context_id=context_id,
        task_id=task_id,
    )


async def send(client: Client, message: Message, *, return_immediately: bool = False) -> Task:
    """SendMessage (non-streaming): the one task it answers."""
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(return_immediately=return_immediately)
    )
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


async def wait_until_working(client: Client, task_id: str) -> Task:
    """Poll GetTask until the task runs its tool (the first tool call is a WORKING status)."""
    deadline = time.monotonic() + 20
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state == TaskState.TASK_STATE_WORKING and get_data_parts(list(task.status.message.parts)):
            return task
        assert time.monotonic() < deadline, task
        await asyncio.sleep(0.05)


def reply(task: Task) -> str:
    [artifact] = task.artifacts
    assert artifact.name == "reply"
    return get_artifact_text(artifact)


def ca_events(task: Task) -> list[dict[str, Any]]:
    """The run events (``caEvent`` data parts) in the task's history."""
    return [
        data["caEvent"]
        for message in task.history
        for data in get_data_parts(list(message.parts))
        if isinstance(data, dict) and "caEvent" in data
    ]


def status_data(task: Task) -> dict[str, Any]:
    [data] = get_data_parts(list(task.status.message.parts))
    assert isinstance(data, dict)
    return data


def ctx() -> str:
    return uuid.uuid4().hex


# -- cards --------------------------------------------------------------------------------


V03_FIELDS = ("url", "preferredTransport", "protocolVersion", "additionalInterfaces")
"""The v0.3 top-level fields served beside v1.0's, for v0.3 clients (test_interop_v03 reads them)."""


def parse_card(data: dict[str, Any]) -> AgentCard:
    """The served JSON as a2a's AgentCard: no field it does not know besides the v0.3 ones, and
    ParseDict → MessageToDict is lossless."""
    v1 = {key: value for key, value in data.items() if key not in V03_FIELDS}
    card: AgentCard = ParseDict(v1, AgentCard())  # strict: an unknown field raises
    for extension in v1.get("capabilities", {}).get("extensions", []):
        if extension.get("required") is False:  # a2a-sdk's v0.3 merge writes it; v1.0 JSON omits a false
            del extension["required"]
    assert MessageToDict(card) == v1, "the card lost or changed a field"
    return card


def assert_v1_card(card: AgentCard, name: str, base: str) -> None:
    assert card.name == name and card.description and card.version
    interfaces = {(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces}
    assert interfaces == {
        ("JSONRPC", f"{base}/agents/{name}/", "1.0"),
        ("HTTP+JSON", f"{base}/agents/{name}/rest", "1.0"),
        ("JSONRPC", f"{base}/agents/{name}/", "0.3.0"),
        ("HTTP+JSON", f"{base}/agents/{name}/rest", "0.3.0"),
    }
    assert card.HasField("capabilities") and card.capabilities.streaming
    assert EXTENSION in [e.uri for e in card.capabilities.extensions]
    assert list(card.default_input_modes) == ["text/plain"]
    assert "text/plain" in card.default_output_modes
    assert card.skills
    for skill in card.skills:
        assert skill.id and skill.name and skill.description and skill.tags


def test_cards_at_agent_and_root_paths_parse_as_v1_agent_cards(server: ServerProcess) -> None:
    for name in ("echo", "guide", "approver", "twice"):
        response = httpx.get(f"{server.url}/agents/{name}/.well-known/agent-card.json")
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
        assert_v1_card(parse_card(response.json()), name, server.url)
    guide = parse_card(httpx.get(f"{server.url}/agents/guide/.well-known/agent-card.json").json())
    [skill] = guide.skills
    assert (skill.id, skill.name, list(skill.tags)) == ("directions", "Directions", ["travel", "maps"])

    echo = httpx.get(f"{server.url}/agents/echo/.well-known/agent-card.json").json()
    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):  # the default agent
        root = httpx.get(server.url + path)
        assert root.status_code == 200 and root.json() == echo

    async def discover() -> str:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(server.url, ClientConfig(streaming=False, httpx_client=http))
            async with client:
                return reply(await send(client, user_message("found you")))

    assert run(discover()) == "[echo] You said: found you"


def test_card_etag_and_if_none_match(server: ServerProcess) -> None:
    url = f"{server.url}/agents/echo/.well-known/agent-card.json"
    first = httpx.get(url)
    etag = first.headers["etag"]
    assert etag and "max-age" in first.headers["cache-control"]
    cached = httpx.get(url, headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b"" and cached.headers["etag"] == etag
    assert httpx.get(url, headers={"If-None-Match": 'W/"something-else"'}).status_code == 200
    other = httpx.get(f"{server.url}/agents/guide/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert other.status_code == 200 and other.headers["etag"] != etag


# -- messages and tasks -------------------------------------------------------------------


def test_send_message_answers_the_completed_task_with_the_reply(server: ServerProcess) -> None:
    async def main() -> Task:
        async with a2a_client(server.url, "echo") as client:
            return await send(client, user_message("hello there", context_id=ctx()))

    task = run(main())
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply(task) == "[echo] You said: hello there"
    assert task.history[0].role == Role.ROLE_USER and get_text_parts(list(task.history[0].parts)) == ["hello there"]
    # our fields follow A2A's JSON naming (camelCase), in the status metadata as everywhere else
    metadata = MessageToDict(task)["metadata"]  # a status update's metadata lands on the task
    assert metadata["stopReason"] == "end_turn"
    assert set(metadata["usage"]) == {"inputTokens", "outputTokens", "modelCalls", "toolCalls", "totalTokens"}


def test_streaming_yields_status_updates_and_reply_chunks(server: ServerProcess) -> None:
    async def main() -> list[StreamResponse]:
        async with a2a_client(server.url, "echo", streaming=True) as client:
            request = SendMessageRequest(message=user_message("stream me a few words please", context_id=ctx()))
            return [event async for event in client.send_message(request)]

    events = run(main())
    expected = "[echo] You said: stream me a few words please"
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert TaskState.TASK_STATE_WORKING in states and states[-1] == TaskState.TASK_STATE_COMPLETED
    assert events[-1].HasField("status_update") and events[-1].status_update.status.state == states[-1]
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    streamed = [c for c in chunks if not c.last_chunk]
    assert len(streamed) > 1, "the reply should arrive in several chunks"
    assert not streamed[0].append and all(c.append for c in streamed[1:])
    assert "".join(get_artifact_text(c.artifact) for c in streamed) == expected
    assert chunks[-1].last_chunk and get_artifact_text(chunks[-1].artifact) == expected
    assert {c.artifact.artifact_id for c in chunks} == {"reply"}


def test_get_task_and_list_tasks(server: ServerProcess) -> None:
    context = ctx()

    async def main() -> tuple[list[Task], Task, list[Task]]:
        async with a2a_client(server.url, "echo") as client:
            sent = [await send(client, user_message(text, context_id=context)) for text in ("one", "two")]
            got = await client.get_task(GetTaskRequest(id=sent[0].id))
            listed = await client.list_tasks(ListTasksRequest(context_id=context, include_artifacts=True))
            return sent, got, list(listed.tasks)

    sent, got, listed = run(main())
    assert got.id == sent[0].id and got.context_id == context
    assert got.status.state == TaskState.TASK_STATE_COMPLETED and reply(got) == "[echo] You said: one"
    assert {t.id for t in listed} == {t.id for t in sent}
    assert sorted(reply(t) for t in listed) == ["[echo] You said: one", "[echo] You said: two"]


def test_multi_turn_in_one_context_continues_the_conversation(server: ServerProcess) -> None:
    first_context, other_context = ctx(), ctx()

    async def main() -> list[Task]:
        async with a2a_client(server.url, "twice") as client:
            return [
                await send(client, user_message("hi", context_id=first_context)),
                await send(client, user_message("again", context_id=first_context)),
                await send(client, user_message("hi", context_id=other_context)),
            ]

    first, second, other = run(main())
    assert first.id != second.id and first.context_id == second.context_id == first_context
    assert [reply(first), reply(second)] == ["first answer", "second answer"]
    assert reply(other) == "first answer"  # another context has its own history


def test_cancel_stops_a_slow_task(server: ServerProcess) -> None:
    async def main() -> tuple[Task, float, Task]:
        async with a2a_client(server.url, "slow") as client:
            started = await send(client, user_message("take a nap", context_id=ctx()), return_immediately=True)
            await wait_until_working(client, started.id)
            await asyncio.sleep(0.3)  # well inside the 5 s nap
            t0 = time.monotonic()
            canceled = await client.cancel_task(CancelTaskRequest(id=started.id))
            elapsed = time.monotonic() - t0
            return canceled, elapsed, await client.get_task(GetTaskRequest(id=started.id))

    canceled, elapsed, after = run(main())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert elapsed < 2, f"cancel took {elapsed:.1f} s"
    assert after.status.state == TaskState.TASK_STATE_CANCELED
    assert (server.root / "nap-interrupted").exists(), "the tool was not stopped: the graph still runs"
    listed = run_ca("tasks", "list", "--json", cwd=server.root)
    assert listed.returncode == 0, listed.stderr
    assert {t["id"]: t["state"] for t in json.loads(listed.stdout)}[after.id] == "canceled"


# -- approvals ----------------------------------------------------------------------------


def assert_waits_for_approval(task: Task, file: str) -> None:
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    data = status_data(task)
    assert data["extension"] == EXTENSION
    [pending] = data["pending"]
    assert pending["tool"] == "append" and pending["args"] == {"file": file, "text": "hello"}
    assert {"approve", "reject"} <= set(pending["decisions"])
    assert pending["callId"] and "call_id" not in pending
    assert "approve" in " ".join(get_text_parts(list(task.status.message.parts)))


def test_approval_round_trip_runs_the_side_effect_once(server: ServerProcess) -> None:
    async def main() -> tuple[Task, Task]:
        async with a2a_client(server.url, "approver") as client:
            paused = await send(client, user_message("go", context_id=ctx()))
            assert not (server.root / "approved.log").exists()  # nothing ran before the decision
            assert_waits_for_approval(paused, "approved.log")
            done = await send(client, user_message("approve", task_id=paused.id, context_id=paused.context_id))
            with pytest.raises(UnsupportedOperationError):  # a finished task takes no more decisions
                await send(client, user_message("approve", task_id=paused.id, context_id=paused.context_id))
            return paused, done

    paused, done = run(main())
    assert done.id == paused.id and done.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply(done) == "done"
    assert (server.root / "approved.log").read_text() == "hello\n"
    assert [(e["tool"], e["result"]) for e in ca_events(done) if e["kind"] == "tool_result"] == [("append", "appended")]


def test_an_unreadable_decision_changes_nothing_and_says_what_to_send(server: ServerProcess) -> None:
    async def main() -> tuple[Task, Task, Task]:
        async with a2a_client(server.url, "approver") as client:
            paused = await send(client, user_message("go", context_id=ctx()))
            where = {"task_id": paused.id, "context_id": paused.context_id}
            garbled = await send(client, user_message("maybe later?", **where))
            answer = new_data_part({"decision": "answer", "text": "an answer is not an approval"})
            wrong_kind = await send(client, user_message(answer, **where))
            done = await send(client, user_message("approve", **where))
            return garbled, wrong_kind, done

    garbled, wrong_kind, done = run(main())
    for task, why in (
        (garbled, "this task is waiting for a decision: answer 'approve', 'reject: REASON'"),
        (wrong_kind, "waits for an approval, not an answer"),
    ):
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        why_text, question = get_text_parts(list(task.status.message.parts))  # no pile-up of earlier whys
        assert why in why_text and "approve" in question
        assert status_data(task)["pending"][0]["tool"] == "append"  # still the same question
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and reply(done) == "done"
    assert (server.root / "approved.log").read_text().count("hello") >= 1


def test_rejection_as_a_data_part_skips_the_side_effect(server: ServerProcess) -> None:
    async def main() -> Task:
        async with a2a_client(server.url, "rejecter") as client:
            paused = await send(client, user_message("go", context_id=ctx()))
            assert_waits_for_approval(paused, "rejected.log")
            decision = new_data_part({"decision": "reject", "reason": "no"})
            done = await send(client, user_message(decision, task_id=paused.id, context_id=paused.context_id))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            return await client.get_task(GetTaskRequest(id=paused.id))

    done = run(main())
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and reply(done) == "done"
    assert not (server.root / "rejected.log").exists()
    [result] = [e for e in ca_events(done) if e["kind"] == "tool_result"]  # the model was told why
    assert result["isError"] and result["result"] == "rejected by the user: no"


def desk_message(text: str, kind: str, *, metadata: dict[str, Any] | None = None, **ids: str) -> Message:
    """A message to ``desk``, whose router reads the messageId's prefix."""
    message = user_message(text, **ids)
    message.message_id = f"{kind}-{uuid.uuid4().hex}"
    if metadata:
        message.metadata.update(metadata)
    return message


def test_a_message_step_answers_with_a_message_and_no_task(server: ServerProcess) -> None:
    async def main() -> list[StreamResponse]:
        async with a2a_client(server.url, "desk") as client:
            request = SendMessageRequest(message=desk_message("Ada", "hello", context_id=ctx()))
            return [r async for r in client.send_message(request)]

    [response] = run(main())
    assert response.HasField("message") and not response.HasField("task")
    assert response.message.role == Role.ROLE_AGENT and not response.message.task_id
    assert get_text_parts(list(response.message.parts)) == ["Hello, Ada"]


def test_artifact_step_parts_reach_the_client_as_text_data_and_files(server: ServerProcess) -> None:
    async def main() -> tuple[Task, Task]:
        async with a2a_client(server.url, "desk") as client:
            message = desk_message("the roadmap", "files", metadata={"team": "ops"}, context_id=ctx())
            done = await send(client, message)
            return done, await client.get_task(GetTaskRequest(id=done.id))

    done, stored = run(main())
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    for task in (done, stored):
        results, answer = task.artifacts
        assert (results.artifact_id, results.name) == ("bundle", "results")
        assert results.metadata["description"] == "what was asked for"
        text, data, raw, url = results.parts
        assert text.text == "for ops"
        assert MessageToDict(data)["data"] == {"asked": "the roadmap", "count": 3}
        assert (raw.raw, raw.filename, raw.media_type) == (b"notes on the roadmap", "notes.txt", "text/plain")
        assert (url.url, url.filename, url.media_type) == (
            "https://example.com/spec.pdf",
            "spec.pdf",
            "application/pdf",
        )
        assert answer.name == "reply" and get_artifact_text(answer) == "the roadmap"  # the input passed through


def test_an_ask_step_takes_free_text_answers_until_one_fits(server: ServerProcess) -> None:
    async def main() -> tuple[Task, Task, Task]:
        async with a2a_client(server.url, "desk") as client:
            asked = await send(client, desk_message("where is my order?", "help", context_id=ctx()))
            again = await send(client, user_message("the blue one", task_id=asked.id, context_id=asked.context_id))
            done = await send(client, user_message("4711", task_id=asked.id, context_id=asked.context_id))
            return asked, again, done

    asked, again, done = run(main())
    for task in (asked, again):
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        data = status_data(task)
        [pending] = data["pending"]
        assert (pending["kind"], pending["message"], pending["decisions"]) == (
            "ask",
            "Which order do you mean?",
            ["answer", "reject"],
        )
        assert "Reply with your answer." in get_text_parts(list(task.status.message.parts))[0]
    assert done.id == asked.id and done.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply(done) == "4711"
    texts = [get_text_parts(list(m.parts)) for m in done.history if m.role == Role.ROLE_USER]
    assert texts == [["where is my order?"], ["the blue one"], ["4711"]]


def test_subscribe_to_a_waiting_task_follows_it_to_completion(server: ServerProcess) -> None:
    async def main() -> tuple[list[StreamResponse], Task]:
        async with (
            a2a_client(server.url, "watched") as sender,
            a2a_client(server.url, "watched", streaming=True) as watcher,
        ):
            paused = await send(sender, user_message("go", context_id=ctx()))
            assert_waits_for_approval(paused, "watched.log")
            events: list[StreamResponse] = []
            subscribed = asyncio.Event()

            async def watch() -> None:
                async for event in watcher.subscribe(SubscribeToTaskRequest(id=paused.id)):
                    events.append(event)
                    subscribed.set()
                    if event.HasField("status_update") and event.status_update.status.state in (
                        TaskState.TASK_STATE_COMPLETED,
                        TaskState.TASK_STATE_FAILED,
                    ):
                        return

            watching = asyncio.create_task(watch())
            await asyncio.wait_for(subscribed.wait(), 20)
            done = await send(sender, user_message("approve", task_id=paused.id, context_id=paused.context_id))
            await asyncio.wait_for(watching, 20)
            return events, done

    events, done = run(main())
    assert events[0].HasField("task") and events[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    finals = [e.artifact_update for e in events if e.HasField("artifact_update") and e.artifact_update.last_chunk]
    assert [get_artifact_text(a.artifact) for a in finals] == ["done"]
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert (server.root / "watched.log").read_text() == "hello\n"


# -- other bindings and versions ----------------------------------------------------------


def test_v03_message_send_without_version_header(server: ServerProcess) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "v03",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "text", "text": "old school"}],
            }
        },
    }
    response = httpx.post(f"{server.url}/agents/echo/", json=body, timeout=30)
    assert response.status_code == 200
    answer = response.json()
    assert answer["id"] == "v03" and "error" not in answer, answer
    task = answer["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    [artifact] = task["artifacts"]
    assert artifact["parts"] == [{"kind": "text", "text": "[echo] You said: old school"}]


def test_http_json_binding_message_send(server: ServerProcess) -> None:
    body = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "over rest"}]}}
    response = httpx.post(
        f"{server.url}/agents/echo/rest/message:send", json=body, headers={"A2A-Version": "1.0"}, timeout=30
    )
    assert response.status_code == 200, response.text
    task = response.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "[echo] You said: over rest"}]

    async def main() -> Task:  # the official client picks the same binding from the card
        async with a2a_client(server.url, "echo", binding="HTTP+JSON") as client:
            sent = await send(client, user_message("rest client", context_id=ctx()))
            return await client.get_task(GetTaskRequest(id=sent.id))

    assert reply(run(main())) == "[echo] You said: rest client"


def test_failing_run_ends_failed_with_a_structured_reason(server: ServerProcess) -> None:
    async def main() -> Task:
        async with a2a_client(server.url, "broken") as client:
            return await send(client, user_message("hi", context_id=ctx()))

    task = run(main())
    assert task.status.state == TaskState.TASK_STATE_FAILED
    error = status_data(task)["error"]
    assert set(error) == {"code", "reason"} and error["code"] == "run_failed"
    assert "ANTHROPIC_API_KEY" in error["reason"]


# -- hostile and malformed requests -------------------------------------------------------


def rpc(server: ServerProcess, content: bytes | str, **headers: str) -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/agents/echo/",
        content=content,
        headers={"Content-Type": "application/json", "A2A-Version": "1.0", **headers},
        timeout=60,
    )
    answer: dict[str, Any] = response.json()
    return answer


def error_code(answer: dict[str, Any]) -> int:
    assert "result" not in answer, answer
    code: int = answer["error"]["code"]
    return code


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700, id="invalid-json"),
        pytest.param(b"\xff\xfe not even text", -32700, id="not-utf8"),
        pytest.param(b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}]', -32600, id="array"),
        pytest.param(b'"just a string"', -32600, id="string"),
        pytest.param(b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": {}}', -32600, id="jsonrpc-1.0"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": 42}', -32600, id="method-not-a-string"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": "hi"}}', -32602, id="message-a-string"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": ["a"]}}', -32602, id="id-a-list"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": "many"}}', -32602, id="page-size-a-string"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}', -32601, id="unknown-method"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 1, "method": "_cleveragents/nope", "params": {}}', -32601, id="unknown-extension-method"),
    ],
)  # fmt: skip
def test_malformed_requests_get_json_rpc_errors(server: ServerProcess, body: bytes, code: int) -> None:
    assert error_code(rpc(server, body)) == code
    server.assert_alive()


def test_a_huge_body_is_refused_and_the_server_stays_up(server: ServerProcess) -> None:
    text = "x" * (10 * 1024 * 1024)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "SendMessage",
            "params": {"message": {"messageId": "big", "role": "ROLE_USER", "parts": [{"text": text}]}},
        }
    )
    response = httpx.post(
        f"{server.url}/agents/echo/",
        content=body,
        headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
        timeout=60,
    )
    assert response.status_code == 413, response.text[:500]  # server.max_request_bytes, 4 MiB by default
    assert error_code(response.json()) == -32600
    server.assert_alive()


def test_unknown_task_is_an_a2a_error(server: ServerProcess) -> None:
    answer = rpc(server, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}}))
    assert error_code(answer) == -32001  # TaskNotFoundError
    server.assert_alive()


# -- restart ------------------------------------------------------------------------------


def test_sigkill_keeps_a_waiting_task_and_fails_a_running_one_with_a_reason(
    make_project: ProjectFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = make_project(
        {
            "ca.yaml": "default_agent: writer\n",
            "agents/writer.yaml": writer_agent(),
            "agents/slow.yaml": PROJECT["agents/slow.yaml"].replace("seconds: 5", "seconds: 60"),
            "tools/side.py": SIDE_EFFECT,
            "tools/nap.py": NAP,
        }
    )
    logs = tmp_path_factory.mktemp("restart-logs")
    first = start_serve(root, logs=logs, env=NO_KEY)
    try:

        async def pause() -> tuple[Task, Task]:
            async with a2a_client(first.url, "writer") as client, a2a_client(first.url, "slow") as slow:
                started = await send(slow, user_message("nap", context_id=ctx()), return_immediately=True)
                await wait_until_working(slow, started.id)
                return await send(client, user_message("go", context_id=ctx())), started

        paused, running = run(pause())
        assert_waits_for_approval(paused, "effects.log")
    finally:
        first.stop(signal.SIGKILL)
    assert first.proc.returncode == -signal.SIGKILL

    second = start_serve(root, logs=logs, env=NO_KEY)
    try:

        async def resume() -> tuple[Task, Task, Task]:
            async with a2a_client(second.url, "writer") as client, a2a_client(second.url, "slow") as slow:
                after = await client.get_task(GetTaskRequest(id=paused.id))
                interrupted = await slow.get_task(GetTaskRequest(id=running.id))  # each agent's path: its tasks
                done = await send(client, user_message("approve", task_id=paused.id, context_id=paused.context_id))
                return after, interrupted, done

        after, interrupted, done = run(resume())
        listed = run_ca("tasks", "list", "--json", cwd=root)
    finally:
        second.stop()
    assert after.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_data(after)["pending"][0]["tool"] == "append"
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and reply(done) == "done"
    assert (root / "effects.log").read_text() == "hello\n"

    assert interrupted.status.state == TaskState.TASK_STATE_FAILED  # not "working" forever
    error = status_data(interrupted)["error"]
    assert error["code"] == "run_failed" and "stopped while this task was running" in error["reason"]
    states = {t["id"]: t["state"] for t in json.loads(listed.stdout)}
    assert states == {paused.id: "completed", running.id: "failed"}
    second.assert_clean_exit()
