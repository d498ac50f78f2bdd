"""An HTTP MCP server that refuses harness9 (a missing or expired token, a broken
gateway) is reported with the HTTP status it answered, which the SDK's own error
("server returned an error response") leaves out."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.cli import cli
from tests.tools.test_mcp import configure


class _Refusing(BaseHTTPRequestHandler):
    """Answers every request with the status the server was made with, as a gateway in
    front of an MCP server does (401 with a bearer challenge for a missing token)."""

    status = 401

    def do_POST(self) -> None:
        body = b'{"error": "refused"}'
        self.send_response(self.status)
        self.send_header("WWW-Authenticate", 'Bearer realm="mcp"')
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST
    do_DELETE = do_POST

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def refusing() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "said"), [(401, "HTTP 401 Unauthorized"), (503, "HTTP 503 Service Unavailable")]
)
def test_a_refusing_http_server_is_reported_with_its_status(
    harness9_home, workdir, refusing, status, said, monkeypatch
):
    monkeypatch.setattr(_Refusing, "status", status)
    url = f"http://127.0.0.1:{refusing.server_address[1]}/mcp"
    configure(harness9_home, {"web": {"url": url, "timeout": 5}})

    result = cli("mcp", "list", "--json", "--workdir", str(workdir))

    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["state"] == "failed"
    assert row["error"] == f"did not start: server returned an error response ({said})"
