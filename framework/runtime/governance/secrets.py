"""Masking secret values (those interpolated from ``${VAR}`` secrets) out of text before it is shown.

Secrets come from ``Project.secrets``. Every occurrence of a secret value becomes ``***``. The
longest values are replaced first, in one pass, so a secret containing another is masked whole
rather than leaving a recognisable remainder. Values shorter than :data:`MIN_SECRET_CHARS` are
left alone: masking ``"1"`` or ``"on"`` everywhere would mangle ordinary text while hiding
nothing worth hiding.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

MASK = "***"
MIN_SECRET_CHARS = 4


@functools.lru_cache(maxsize=64)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    values = sorted((s for s in secrets if len(s) >= MIN_SECRET_CHARS), key=lambda s: (-len(s), s))
    if not values:
        return None
    return re.compile("|".join(re.escape(v) for v in values))


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value of at least four characters replaced by ``***``."""
    pattern = _pattern(frozenset(secrets))
    if pattern is None:
        return text
    return pattern.sub(MASK, text)
