"""A real MCP server for the tests, built with the SDK's own server class (MCPServer).

Run: ``python demo.py [--http PORT [--refuse-when FILE]] [--tools N] [--marker FILE]``. Over stdio by default;
``--http PORT`` serves Streamable HTTP on 127.0.0.1:PORT at /mcp. ``--tools N`` adds N
filler tools (``filler_0`` ...) with long descriptions, so the definitions are big enough
to be deferred. ``--marker FILE`` writes a line to FILE when the server starts (a test
then knows whether it was started at all). ``--refuse-when FILE``: while FILE exists, every
HTTP request is answered ``401 Unauthorized``, as a gateway does once a token expired.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations

# A 1x1 transparent PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def build(tools: int, marker: str = "") -> MCPServer:
    server = MCPServer("demo")

    @server.tool(description="Add two integers and return the sum.")
    def add(a: int, b: int) -> str:
        return f"sum={a + b}"

    @server.tool(
        description="Return the text given, reversed.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def reverse(text: str) -> str:
        return text[::-1]

    @server.tool(description="Fail on purpose with the message given.")
    def fail(message: str) -> str:
        raise ValueError(message)

    @server.tool(description="Exit the server process at once, without answering.")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Sleep for the given seconds, then answer.")
    def sleep(seconds: float) -> str:
        if marker:
            Path(marker + ".sleeping").write_text("yes", encoding="utf-8")
        time.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Return the given number of numbered lines of text.")
    def lines(count: int) -> str:
        return "".join(f"line {i}: some log text of the server\n" for i in range(count))

    @server.tool(description="Return a tiny PNG image.")
    def picture() -> Image:
        return Image(data=PNG, format="png")

    for i in range(tools):
        server.add_tool(
            _filler(i),
            name=f"filler_{i}",
            description=f"Filler tool number {i}. " + "It does nothing useful at all. " * 20,
        )
    return server


def _filler(i: int):  # noqa: ANN202 - the SDK reads the signature
    def filler(query: str, limit: int = 10) -> str:
        return f"filler {i}: {query} ({limit})"

    return filler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--marker", default="")
    parser.add_argument("--refuse-when", default="")
    args = parser.parse_args()
    if args.marker:
        with Path(args.marker).open("a", encoding="utf-8") as fh:
            fh.write(f"started {os.getpid()}\n")
    server = build(args.tools, args.marker)
    if args.http and args.refuse_when:
        _serve_refusing(server, args.http, Path(args.refuse_when))
    elif args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()
    sys.exit(0)


def _serve_refusing(server: MCPServer, port: int, flag: Path) -> None:
    """Streamable HTTP on ``port``, answering 401 to every request while ``flag`` exists."""
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")

    async def refusing(scope, receive, send) -> None:  # noqa: ANN001 - an ASGI app
        if scope["type"] == "http" and flag.exists():
            body = b'{"error": "invalid_token"}'
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    uvicorn.run(refusing, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
