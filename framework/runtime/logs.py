"""How ``ca serve`` and ``ca run --stdio`` log: human lines (the default) or one JSON object per line.

Both go to stderr (over stdio, stdout is the protocol's). The JSON form is the standard
``logging`` module with :class:`JsonFormatter`: each record is ``time``, ``level``, ``logger``,
``message``, and, when known, ``task_id``, ``context_id``, ``agent``, ``caller`` and
``trace_id``. The ids come from the record (``extra=``) or else from :data:`FIELDS`, set where
a task runs (:func:`bind`: ``Runtime.send`` and ``decide`` for every transport, and a2a-sdk's
executor task from its start), so a library's record made inside a run carries its task too.
The trace id is the current OpenTelemetry span's, read only when something already imported
OpenTelemetry (tracing on): with tracing off nothing of it is imported here.

Records are masked where they are made (``governance.secrets.mask_logs``, the record factory);
the formatter masks the traceback text once more, as it may be formatted here.

Every audit record is logged at INFO by :func:`audited` (``task.state state=completed``,
``tool.call tool=fs.read`` …), so a JSON log shows each task's transitions with its ids; in
the human form INFO is not shown, as before.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING

from framework.runtime.governance.secrets import KNOWN
from framework.spec.project import LogFormat, sets_deployment

if TYPE_CHECKING:
    from framework.runtime.audit import AuditRecord

IDS = ("task_id", "context_id", "agent", "caller")
"""The ids a record carries when known, in this order after the message."""

FIELDS: ContextVar[Mapping[str, str]] = ContextVar("ca_log_fields", default=MappingProxyType({}))
"""The ids of the task the current asyncio task serves (each asyncio task has its own copy)."""

logger = logging.getLogger("framework.audit")


def bind(**ids: str | None) -> None:
    """Set the ids of the task being served here (``task_id=…, context_id=…, caller=…``), for every
    record made from now on in this asyncio task and the ones it starts."""
    FIELDS.set({**FIELDS.get(), **{k: v for k, v in ids.items() if v}})


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        bound = FIELDS.get()
        for name in IDS:
            value = getattr(record, name, None) or bound.get(name)
            if value:
                entry[name] = str(value)
        trace_id = _trace_id()
        if trace_id:
            entry["trace_id"] = trace_id
        if record.exc_info:
            entry["exception"] = KNOWN.text(record.exc_text or self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def _trace_id() -> str:
    trace = sys.modules.get("opentelemetry.trace")  # imported only with tracing on: never imported here
    if trace is None:
        return ""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def configure(log_format: LogFormat) -> None:
    """Set up the process's logging for ``log_format``. ``human`` leaves ``logging`` as it is (the
    warnings and errors of every library, as lines of text); ``json`` sends every record of level
    WARNING and up, and ours from INFO, to stderr as JSON, ``warnings.warn`` included."""
    if log_format == "human":
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("framework").setLevel(logging.INFO)
    logging.captureWarnings(True)


def audited(record: AuditRecord) -> None:
    """Log an audit record (an audit observer): its kind and what it says, with its task's ids."""
    if not logger.isEnabledFor(logging.INFO):
        return
    keys = ("state", "tool", "decision", "by", "reason", "error")
    said = [f"{key}={record.data[key]}" for key in keys if key in record.data]
    ids = {"task_id": record.task_id, "context_id": record.conversation_id, "agent": record.agent}
    logger.info(" ".join([record.kind, *said]), extra=ids)


def chosen(flag: LogFormat | None, environ: Mapping[str, str]) -> LogFormat:
    """The log format of this process: ``--log-format``, else ``CA_LOG_FORMAT``, else ``human``.

    A bad ``CA_LOG_FORMAT`` raises SpecError naming it (framework.spec.settings)."""
    if flag is not None:
        return flag
    if not sets_deployment(environ):
        return "human"
    from framework.spec.settings import read

    return read(environ).log_format
