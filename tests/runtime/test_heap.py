"""The server's frozen heap: what a reload replaced is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from framework.runtime.heap import freeze_loaded


class _Bundle:
    """Stands for a compiled bundle: its graphs refer back to it, so only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.graphs = {"agent": self}


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the other tests run on the heap as it was


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
