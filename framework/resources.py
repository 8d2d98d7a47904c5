"""Where the files shipped with CleverAgents live: built-in profiles and ``ca init`` templates.

In a wheel they are inside the package (``framework/_data``); in a source checkout
they are the repository's top-level ``profiles/`` and ``templates/``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """``profiles`` or ``templates``: the installed copy, else the checkout's."""
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name
