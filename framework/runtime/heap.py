"""What a long-running server process keeps out of the garbage collector's way.

CPython's cyclic collector walks every tracked object of a generation each time it collects it.
A server's heap after start-up is mostly what never goes away — modules, the compiled graphs, the
SDKs' classes — and the full collections that a request load keeps triggering walked all of it:
about a tenth of ``ca serve``'s CPU under ``bench/serve.py``. :func:`freeze_loaded` moves what is
alive into the permanent generation (``gc.freeze``), which collections skip; what requests allocate
is collected as before.
"""

from __future__ import annotations

import gc


def freeze_loaded() -> None:
    """Collect once, then freeze what is left. Called when the server is ready and after each
    reload: first unfrozen, so a bundle the reload replaced can be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
