"""Real proxies that put faults between the pipeline and a service, for fault tests.

- `Toxiproxy`: a client of the Toxiproxy server's HTTP API (tests/support/localservices.py
  `toxiproxy`): make a TCP proxy in front of a service, add and remove toxics (reset_peer,
  limit_data, latency, timeout, ...) on it. TCP-level faults only: it cannot answer with
  an HTTP status.
- `HttpStatusFaults`: a small HTTP/1.1 reverse proxy (a thread of the test process on
  127.0.0.1) that forwards every request to an upstream S3 server, except the requests it
  is armed to fail, which get a real S3 error response (503 SlowDown, 500 InternalError)
  instead, as S3 sends them under load. The Host header is passed on unchanged, so SigV4
  signatures made for the proxy's address still verify upstream. It speaks HTTPS on both
  sides, as the local S3 does, with the S3 server's own certificate.
"""

from __future__ import annotations

import http.client
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from tests.support import localservices

S3_ERRORS = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
}


class Toxiproxy:
    def __init__(self, api_url: str):
        self.api = httpx.Client(base_url=api_url, timeout=10)

    def proxy(self, name: str, listen: str, upstream: str) -> None:
        """A proxy `name` on `listen` (host:port) to `upstream`, made anew without toxics."""
        self.api.delete(f"/proxies/{name}")  # absent is fine
        r = self.api.post("/proxies", json={"name": name, "listen": listen,
                                            "upstream": upstream, "enabled": True})
        assert r.status_code == 201, r.text

    def add_toxic(self, proxy: str, kind: str, attributes: dict, stream: str = "upstream",
                  toxicity: float = 1.0) -> str:
        """Add a toxic (`kind` as Toxiproxy names it); its name, for remove_toxic.
        `stream`: upstream = client to server bytes, downstream = server to client."""
        name = f"{kind}_{stream}"
        r = self.api.post(f"/proxies/{proxy}/toxics", json={
            "name": name, "type": kind, "stream": stream, "toxicity": toxicity,
            "attributes": attributes})
        assert r.status_code == 200, r.text
        return name

    def remove_toxic(self, proxy: str, name: str) -> None:
        r = self.api.delete(f"/proxies/{proxy}/toxics/{name}")
        assert r.status_code == 204, r.text

    def toxics(self, proxy: str) -> list[dict]:
        return self.api.get(f"/proxies/{proxy}/toxics").json()

    def delete(self, proxy: str) -> None:
        self.api.delete(f"/proxies/{proxy}")

    def close(self) -> None:
        self.api.close()


class HttpStatusFaults:
    """Forwards to upstream (host, port); `arm(status, first, count)` makes the requests
    numbered first .. first+count-1 (1-based, counted from the arm call) fail with
    `status`. `requests` counts what it saw, `failed` what it failed. With
    `ignore_conditions`, it plays a server that ignores If-Match / If-None-Match: a PUT the
    real server refuses with 412 is answered 200, as if written."""

    def __init__(self, port: int, upstream: tuple[str, int], ignore_conditions: bool = False):
        self.upstream, self.ignore_conditions = upstream, ignore_conditions
        self.lock = threading.Lock()
        self.requests, self.failed, self._fail = 0, 0, (None, set())
        faults = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect

            def log_message(self, *args):
                pass

            def _any(self):
                body = self._body()
                status = faults._next_fault()
                if status is not None:
                    code, message = S3_ERRORS[status]
                    self._answer(status, [("Content-Type", "application/xml")],
                                 (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}'
                                  f'</Code><Message>{message}</Message><Resource>{self.path}'
                                  '</Resource></Error>').encode())
                    return
                upstream = http.client.HTTPSConnection(*faults.upstream, timeout=120,
                                                       context=faults.client_tls)
                try:
                    upstream.putrequest(self.command, self.path, skip_host=True,
                                        skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in ("content-length", "expect"):
                            upstream.putheader(name, value)
                    if not self._chunked():
                        upstream.putheader("Content-Length", str(len(body)))
                    upstream.endheaders(body)
                    response = upstream.getresponse()
                    data = response.read()
                    headers = [(k, v) for k, v in response.getheaders()
                               if k.lower() not in ("transfer-encoding", "connection")]
                    if (faults.ignore_conditions and self.command == "PUT"
                            and response.status == 412):
                        self._answer(200, [("ETag", '"%032x"' % faults.requests)], b"")
                        return
                    self._answer(response.status, headers, data, head=self.command == "HEAD")
                finally:
                    upstream.close()

            def _chunked(self) -> bool:
                return self.headers.get("Transfer-Encoding", "").lower() == "chunked"

            def _body(self) -> bytes:
                """The request's body as sent: a chunked one (botocore's uploads over
                HTTPS, the checksum in a trailer) with its chunks and trailers."""
                if not self._chunked():
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                raw = []
                while True:
                    raw.append(line := self.rfile.readline())
                    size = int(line.split(b";")[0], 16)
                    raw.append(self.rfile.read(size) + self.rfile.readline())
                    if size == 0:
                        while raw[-1] not in (b"\r\n", b"\n", b""):
                            raw.append(self.rfile.readline())  # trailers, then a blank line
                        return b"".join(raw)

            def _answer(self, status: int, headers, data: bytes, head: bool = False):
                self.send_response(status)
                for name, value in headers:
                    if not (name.lower() == "content-length"):
                        self.send_header(name, value)
                length = dict((k.lower(), v) for k, v in headers).get("content-length")
                self.send_header("Content-Length", length if head and length else str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(localservices.S3_CERTS_DIR / "public.crt",
                                   localservices.S3_CERTS_DIR / "private.key")
        self.client_tls = ssl.create_default_context(cafile=localservices.LOCAL_CA)
        self.server = _QuietServer(("127.0.0.1", port), Handler)
        self.server.socket = server_tls.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.server.server_port}"

    def arm(self, status: int | None, first: int = 1, count: int = 0) -> None:
        with self.lock:
            self.requests, self.failed = 0, 0
            self._fail = (status, set(range(first, first + count)))

    def _next_fault(self) -> int | None:
        with self.lock:
            self.requests += 1
            status, numbers = self._fail
            if status is not None and self.requests in numbers:
                self.failed += 1
                return status
            return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hanging up is fine
            super().handle_error(request, client_address)
