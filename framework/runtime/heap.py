"""What a process keeps out of the garbage collector's way: its start-up, and what it loaded.

CPython's cyclic collector walks every tracked object of a generation each time it collects it.
A server's heap after start-up is mostly what never goes away — modules, the compiled graphs, the
SDKs' classes — and the full collections that a request load keeps triggering walked all of it:
about a tenth of ``ca serve``'s CPU under ``bench/serve.py``. :func:`freeze_loaded` moves what is
alive into the permanent generation (``gc.freeze``), which collections skip; what requests allocate
is collected as before.

Start-up itself is the same story in a shorter time: importing the libraries, loading the project
and compiling an agent allocate objects that live as long as the process, and the collections they
trigger walk them again and again (about 250 collections, some 60 ms of a cold ``ca run``).
:func:`starting_up` pauses collection for that span and freezes what it loaded.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze_loaded() -> None:
    """Collect once, then freeze what is left. Called when the server is ready and after each
    reload: first unfrozen, so a bundle the reload replaced can be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@contextmanager
def starting_up() -> Iterator[None]:
    """No cyclic collection while the block loads what the process keeps (imports, the project, the
    runtime and its stores); then what is alive is frozen (without a collection first: start-up
    leaves little garbage, and the first answer should not wait for a full collection) and
    collection resumes, for what the work allocates from there on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
