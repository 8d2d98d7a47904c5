"""The probes of ``ca serve``, public under ``server.auth`` like the cards.

    /healthz   alive: the process answers (and which bundle it serves); nothing else is checked,
               so a slow database never gets a replica restarted
    /readyz    ready for traffic: the bundle is loaded and the task store answers a query; 503
               with a JSON reason while the server drains after SIGTERM or when the store does not
               answer, so a load balancer or Kubernetes sends the requests elsewhere

While draining, the listening socket is closed (new connections are refused); requests on
connections already open, a prober's kept-alive one included, get the 503.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from framework.protocols.a2a.task_store import WriteBehindTaskStore
from framework.runtime.runtime import Runtime

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
PATHS = (HEALTH_PATH, READY_PATH)
STORE_TIMEOUT = 5.0
"""Seconds the store has to answer ``/readyz``'s query (SQLite queues it behind a write)."""

logger = logging.getLogger(__name__)


class Probes:
    """The two endpoints, and whether the server is draining (set by :meth:`drain`, for good)."""

    def __init__(self, runtime: Runtime, store: WriteBehindTaskStore) -> None:
        self.runtime = runtime
        self.store = store
        self.draining = False

    def drain(self) -> None:
        self.draining = True

    async def health(self, request: Request) -> Response:
        bundle = self.runtime.bundle
        return JSONResponse({"status": "ok", "agents": sorted(bundle.agents), "bundle": bundle.digest[:12]})

    async def ready(self, request: Request) -> Response:
        bundle = self.runtime.bundle
        if self.draining:
            return _unready(
                "draining",
                "the server is shutting down: it finishes its running tasks and accepts no new ones",
            )
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                await self._query_store()
        except Exception as exc:  # any failure of the driver or the network: not ready, and the log says why
            logger.warning("readiness: the task store does not answer: %s: %s", type(exc).__name__, exc)
            return _unready("store_unreachable", f"the task store does not answer ({type(exc).__name__})")
        return JSONResponse({"status": "ready", "agents": sorted(bundle.agents), "bundle": bundle.digest[:12]})

    async def _query_store(self) -> None:
        """One cheap query on the database the server's tasks are in (SQLite file or PostgreSQL)."""
        from sqlalchemy import text

        async with self.store.store.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))


def _unready(status: str, reason: str) -> Response:
    # The reason names no host, user or driver message: /readyz answers anyone.
    return JSONResponse({"status": status, "reason": reason}, status_code=503)
