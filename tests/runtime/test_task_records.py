"""What a task record says about itself: when it was last written, whatever wrote the time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from framework.runtime.task_record import Task


@pytest.mark.parametrize(
    "stored",
    [
        "2026-12-04T08:30:00.000001+00:00",  # as every writer stamps it now
        "2026-12-04T09:30:00.000001+01:00",  # another zone: the same instant
        "2026-12-04T08:30:00.000001",  # no zone: UTC
    ],
)
def test_a_record_knows_when_it_was_last_written_in_utc(stored: str) -> None:
    record = Task(id="t1", agent="echo", conversation="c1", source="cli", state="completed", updated_at=stored)
    assert record.last_written() == datetime(2026, 12, 4, 8, 30, 0, 1, tzinfo=UTC)


def test_a_record_from_before_records_had_times_has_none() -> None:
    assert Task(id="t1", agent="echo", conversation="c1", source="cli", state="completed").last_written() is None
