"""The frozen heap: what a reload replaced is still collected; start-up is not collected, then frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from framework.runtime.heap import YOUNG_THRESHOLD, freeze_loaded, starting_up


class _Bundle:
    """Stands for a compiled bundle: its graphs refer back to it, so only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.graphs = {"agent": self}


@pytest.fixture
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()  # the other tests run on the heap as it was
    gc.set_threshold(*thresholds)


def test_a_bundle_replaced_after_the_freeze_is_collected(unfrozen: None) -> None:
    old = _Bundle()
    gone = weakref.ref(old)
    freeze_loaded()  # the server is ready: the start-up bundle is frozen with everything else
    assert gc.get_freeze_count() > 0
    del old  # a reload swapped it out: only its own cycle holds it
    gc.collect()
    assert gone() is not None, "a frozen object was collected: the freeze did nothing"
    freeze_loaded()  # after the reload
    assert gone() is None, "the replaced bundle stays in memory for good"
    assert gc.get_freeze_count() > 0


def test_start_up_is_not_collected_and_is_frozen_once_over(unfrozen: None) -> None:
    collections: list[str] = []
    watch = lambda phase, info: collections.append(phase)  # noqa: E731
    gc.callbacks.append(watch)
    try:
        with starting_up():
            loaded = _Bundle()  # what start-up keeps: its modules, project, stores
            for _ in range(5000):  # allocations that trigger collections when the collector runs
                _Bundle()
            assert collections == [], "a collection ran during start-up"
        assert gc.isenabled()
        for _ in range(YOUNG_THRESHOLD + 1000):
            _Bundle()
        assert collections, "collection did not resume after start-up"
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD, "the youngest generation is collected as often as before"
    finally:
        gc.callbacks.remove(watch)
    frozen = weakref.ref(loaded)
    del loaded
    gc.collect()
    assert frozen() is not None, "what start-up loaded was not frozen: every collection walks it again"


def test_an_error_during_start_up_still_resumes_collection(unfrozen: None) -> None:
    with pytest.raises(ValueError, match="bad project"), starting_up():
        raise ValueError("bad project")
    assert gc.isenabled()


def test_start_up_leaves_a_collector_someone_turned_off_turned_off(unfrozen: None) -> None:
    gc.disable()
    try:
        with starting_up():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
