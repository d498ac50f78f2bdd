"""Messages typed while a reply streams, at a real terminal (a pseudo-terminal): each is
sent as its own message once the turn ends, and none is echoed into the reply."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.llm_server import ScriptedLLMServer, TextReply
from tests.support.pty_terminal import PtyProcess


def test_two_messages_typed_during_a_reply_are_sent_one_by_one_and_kept_out_of_it(
    llm_server: ScriptedLLMServer, harness9_home: Path, tmp_path: Path
):
    llm_server.reply(TextReply("word " * 60, chunk_size=5, chunk_delay=0.05))  # ~3 s
    llm_server.reply_text("one done")
    llm_server.reply_text("two done")
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    argv += ["--context-window", "32k", "--plain"]
    env = {"HARNESS9_HOME": str(harness9_home), "OPENAI_API_KEY": "sk-test"}

    with PtyProcess(argv, cwd=tmp_path, env=env, columns=100) as term:
        at = term.expect("›")
        term.send("slow please\r")
        at = term.expect("word word", after=at)
        term.send("first ahead\r")
        term.send("second ahead\r")
        term.expect("two done", after=at)
        reply = term.screen()[at : term.screen().index("one done")]
        term.send("\x04")
        assert term.wait(30) == 0

    users = [m["content"] for m in llm_server.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["slow please", "first ahead", "second ahead"]
    words = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", reply.split("›")[0])
    assert "ahead" not in words
