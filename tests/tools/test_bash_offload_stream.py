"""A huge bash output streams whole into the offload store instead of being held in memory."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import tool_results_dir
from harness9.tools.base import ToolContext
from harness9.tools.offload import OffloadConfig, OffloadStore
from harness9.tools.shell import run_command


def ctx_with_store(tmp_path: Path) -> tuple[ToolContext, OffloadStore, str]:
    store = OffloadStore(OffloadConfig(store_dir=tmp_path / "offload"))
    sid = str(uuid.uuid4())
    ctx = ToolContext(
        workdir=tmp_path,
        session=None,
        assume_yes=True,
        session_id=sid,
        open_output=lambda tool, args: store.open_stream(sid, tool, args),
    )
    return ctx, store, sid


def test_twenty_megabytes_of_output_land_whole_in_the_offload_file(tmp_path):
    ctx, store, sid = ctx_with_store(tmp_path)

    result = run_command("head -c 20000000 /dev/zero | tr '\\0' a; echo; echo last-line", ctx, 60)

    assert result.content.startswith("📂 [offload:")
    assert result.content.endswith("exit code: 0")
    assert result.offloaded is not None
    offload_id = result.offloaded.offload_id
    assert result.offloaded.tokens == (20_000_000 + len("\nlast-line\n")) // 4
    stored = tmp_path / "offload" / sid / f"{offload_id}.txt"
    assert stored.stat().st_size == 20_000_000 + len("\nlast-line\n")
    assert len(result.content) < 4000
    assert "last-line" in store.recall(sid, offload_id, offset=20_000_000)


def test_small_output_stays_inline_and_leaves_no_file(tmp_path):
    ctx, _, sid = ctx_with_store(tmp_path)

    result = run_command("echo hello", ctx, 10)

    assert result.content == "hello\nexit code: 0"
    assert result.offloaded is None
    assert list((tmp_path / "offload" / sid).iterdir()) == []


def test_chat_offloads_a_long_bash_output_and_the_next_request_carries_the_marker(
    llm_server, tmp_path
):
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": "seq 1 20000"}))])
    llm_server.reply_text("counted")

    result = CliRunner().invoke(
        app,
        [
            "chat",
            "--model",
            "openai/t",
            "--api-base",
            llm_server.base_url,
            "--yes",
            "--workdir",
            str(tmp_path),
        ],
        input="count\n",
    )

    assert result.exit_code == 0, result.output
    tool_msg = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    assert tool_msg["content"].startswith("📂 [offload:") and "20000" in tool_msg["content"]
    [session_dir] = tool_results_dir().iterdir()
    [offloaded] = session_dir.iterdir()
    assert offloaded.read_text().splitlines()[-1] == "20000"
