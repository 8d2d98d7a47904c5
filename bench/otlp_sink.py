"""A local OTLP/HTTP trace sink for the benches' ``--telemetry`` runs, in a process of its own.

    python bench/otlp_sink.py PORT

Accepts ``POST /v1/traces`` (the protobuf body ca's exporter sends), answers 200 with an empty
``ExportTraceServiceResponse`` (zero bytes is a valid one) and counts requests and bytes;
``GET /count`` answers ``REQUESTS BYTES``. It decodes nothing: the benches measure what exporting
costs the server, not a collector. In its own process, so its CPU is not the measured server's.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

HOST = "127.0.0.1"


class _Sink(BaseHTTPRequestHandler):
    received: ClassVar[list[int]] = [0, 0]
    """Requests and bytes, for the whole process (a handler is made per request)."""
    lock = threading.Lock()

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        self.rfile.read(size)
        with self.lock:
            self.received[0] += 1
            self.received[1] += size
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        body = f"{self.received[0]} {self.received[1]}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # quiet: a bench's output is its figures


class Sink:
    """The sink process: its endpoint for ``OTEL_EXPORTER_OTLP_ENDPOINT``, and what it received."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://{HOST}:{port}"
        command = [sys.executable, str(Path(__file__).resolve()), str(port)]
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.count()
                return
            except OSError:
                time.sleep(0.02)
        self.stop()
        sys.exit("the OTLP sink did not start")

    def count(self) -> tuple[int, int]:
        """(export requests, bytes) received so far."""
        import urllib.request

        with urllib.request.urlopen(f"{self.endpoint}/count", timeout=5) as answer:
            requests, size = answer.read().decode().split()
        return int(requests), int(size)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


if __name__ == "__main__":
    ThreadingHTTPServer((HOST, int(sys.argv[1])), _Sink).serve_forever()
