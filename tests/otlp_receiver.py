"""A real OTLP/HTTP trace receiver on loopback, for tests: it decodes every
``ExportTraceServiceRequest`` the OpenTelemetry exporter posts to ``/v1/traces``
(protobuf, gzip or not) with ``opentelemetry-proto``, and keeps the raw bytes too (a
secret must never be in them)."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived: ids as hex, attributes as plain values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    start: int
    end: int
    service: str = ""
    events: list[str] = field(default_factory=list)


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


class OtlpReceiver:
    """``with OtlpReceiver() as r:`` → ``r.endpoint`` (for ``OTEL_EXPORTER_OTLP_ENDPOINT``),
    ``r.spans``, ``r.raw``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.raw: list[bytes] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(self.path, body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL (the exporter adds ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _take(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(ReceivedSpan(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        s.kind, {a.key: _value(a.value) for a in s.attributes},
                        s.status.code, s.status.message, s.start_time_unix_nano,
                        s.end_time_unix_nano, str(resource.get("service.name", "")),
                        [e.name for e in s.events]))
        with self._lock:
            assert path == "/v1/traces", path
            self.raw.append(body)
            self.spans.extend(spans)

    def named(self, name: str) -> list[ReceivedSpan]:
        """The spans received so far called ``name``."""
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def wait_for(self, name: str, count: int = 1, seconds: float = 15.0) -> list[ReceivedSpan]:
        """Wait until ``count`` spans called ``name`` arrived; them."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = self.named(name)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"no {count} span(s) {name!r} arrived; got "
                             f"{sorted({s.name for s in self.spans})}")

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
