"""An Ollama model that cannot be reached names the address it tried (issue 36, item 21):
$OLLAMA_API_BASE or localhost, not just "the ollama API"."""

from __future__ import annotations

import socket

import pytest

from tests.support.cli import cli, piped


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_ollama_connection_names_the_server_address(monkeypatch: pytest.MonkeyPatch):
    base = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("OLLAMA_API_BASE", base)
    waits: list[float] = []
    env = piped(sleep=waits.append)

    result = cli("chat", "--model", "ollama/llama3", "--context-window", "8k", "-p", "hi", obj=env)

    assert result.exit_code == 1
    last = env.stderr.getvalue().strip().splitlines()[-1]
    assert last.startswith(f"error: could not connect to the Ollama server at {base}: ")
    assert len(waits) == 3  # retried first, as for any server
