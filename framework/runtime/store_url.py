"""``store.url`` as each PostgreSQL driver wants it, and the one error for a server that cannot be used.

``store.url`` is written once (``postgresql://…`` or ``postgresql+asyncpg://…``); the
conversations reach it through psycopg (a libpq URI), the audit through SQLAlchemy on psycopg,
the A2A task rows through SQLAlchemy on asyncpg. No driver is imported here. A message shows
the URL through :func:`framework.spec.urls.hidden` (its passwords ``***``, in the user part and
the query string); the drivers get it as written.
"""

from __future__ import annotations

from framework.errors import StoreUnreachable
from framework.spec.urls import hidden

_POSTGRES = ("postgresql://", "postgresql+")


def is_postgres(url: str) -> bool:
    """Whether ``store.url`` names a PostgreSQL database (every other URL is a SQLite file)."""
    return url.startswith(_POSTGRES)


def libpq_url(url: str) -> str:
    """``postgresql://…`` for psycopg, whichever SQLAlchemy driver ``url`` names."""
    return "postgresql://" + url.split("://", 1)[1]


def psycopg_url(url: str) -> str:
    """``postgresql+psycopg://…``: SQLAlchemy on psycopg (its plain ``postgresql://`` means psycopg2)."""
    return "postgresql+psycopg://" + url.split("://", 1)[1]


def unreachable(url: str, exc: BaseException) -> StoreUnreachable:
    """One line for a PostgreSQL server that refused or never answered (the driver's first line says why)."""
    reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return StoreUnreachable(
        f"cannot use the store {hidden(url)} ({reason}): check store.url in ca.yaml, that the server runs"
        " and that the database exists"
    )
