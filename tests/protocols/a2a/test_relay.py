"""What a relayed subscription sends between two versions of a task's row (``relay.changes``).

The end-to-end relay across two replicas is in ``test_replicas.py``; this is the diff it rests on.
"""

from __future__ import annotations

from a2a.helpers import get_artifact_text, new_text_part
from a2a.types import Artifact, Task, TaskState, TaskStatus

from framework.protocols.a2a.relay import changes


def task(state: TaskState, *artifacts: tuple[str, str]) -> Task:
    return Task(
        id="t1",
        context_id="c1",
        status=TaskStatus(state=state),
        artifacts=[Artifact(artifact_id=aid, parts=[new_text_part(text)]) for aid, text in artifacts],
    )


def test_an_unchanged_row_sends_nothing() -> None:
    row = task(TaskState.TASK_STATE_WORKING, ("reply", "half"))
    assert changes(row, task(TaskState.TASK_STATE_WORKING, ("reply", "half"))) == []


def test_a_grown_artifact_is_sent_whole_and_replaces_the_one_seen() -> None:
    (event,) = changes(
        task(TaskState.TASK_STATE_WORKING, ("reply", "half")),
        task(TaskState.TASK_STATE_WORKING, ("reply", "half and more")),
    )
    assert event.artifact.artifact_id == "reply" and get_artifact_text(event.artifact) == "half and more"
    assert (event.append, event.last_chunk) == (False, False)


def test_the_final_state_comes_after_the_artifacts_it_brought() -> None:
    events = changes(
        task(TaskState.TASK_STATE_WORKING, ("notes", "kept")),
        task(TaskState.TASK_STATE_COMPLETED, ("notes", "kept"), ("reply", "done")),
    )
    assert [type(e).__name__ for e in events] == ["TaskArtifactUpdateEvent", "TaskStatusUpdateEvent"]
    assert events[0].artifact.artifact_id == "reply" and events[0].last_chunk is True
    assert events[1].status.state == TaskState.TASK_STATE_COMPLETED
    assert (events[1].task_id, events[1].context_id) == ("t1", "c1")
