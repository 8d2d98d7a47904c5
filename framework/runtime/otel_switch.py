"""Whether the standard ``OTEL_*`` variables ask for traces: standard library only, so the ``ca``
entry point can decide before anything heavy (a2a-sdk reads its own switch when imported)."""

from __future__ import annotations

from collections.abc import Mapping


def wanted(environ: Mapping[str, str]) -> bool:
    """``OTEL_SDK_DISABLED=true`` is off; else ``OTEL_TRACES_EXPORTER`` naming anything but ``none``,
    or, without it, an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``..._TRACES_ENDPOINT``)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER")
    if exporters is not None:
        return any(e.strip().lower() not in ("", "none") for e in exporters.split(","))
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
