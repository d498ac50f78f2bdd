"""/last shows a person the whole output, also when it was offloaded (issue 36, item 19):
the model's summary ends in an instruction for the model, not for the person."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import chat
from tests.support.llm_server import ScriptedLLMServer


def test_last_shows_an_offloaded_output_in_full_without_the_models_instruction(
    llm_server: ScriptedLLMServer, tmp_path: Path
):
    lines = "\n".join(f"log line {n:03d} of the nightly build" for n in range(1, 401))
    (tmp_path / "build.log").write_text(lines + "\n")
    llm_server.reply_tool_calls([("c1", "read_file", '{"path": "build.log"}')])
    llm_server.reply_text("read it")

    result = chat(llm_server, "read build.log\n/last\n", "--context-window", "8k", workdir=tmp_path)

    assert result.exit_code == 0, result.stderr
    sent = str(llm_server.requests[1]["messages"][-1]["content"])
    assert "offload_recall(" in sent  # the model was shown a summary and the handle
    after = result.stderr.split("→ read_file", 2)[2]
    assert "log line 001 of the nightly build" in after
    assert "log line 250 of the nightly build" in after
    assert "log line 400 of the nightly build" in after
    assert "offload_recall" not in after


def test_the_finished_event_carries_the_offload_of_a_big_result_and_none_of_a_small_one(
    llm_server: ScriptedLLMServer, tmp_path: Path
):
    from harness9.config import ContextOptions, Settings
    from harness9.engine import events as ev
    from harness9.engine.setup import build_engine
    from harness9.store import MemorySession

    (tmp_path / "build.log").write_text("".join(f"log line {n:03d}\n" for n in range(1, 2001)))
    (tmp_path / "notes.txt").write_text("short\n")
    llm_server.reply_tool_calls([("c1", "read_file", '{"path": "build.log"}')])
    llm_server.reply_tool_calls([("c2", "read_file", '{"path": "notes.txt"}')])
    llm_server.reply_text("read both")
    engine = build_engine(
        Settings("openai/test-model", llm_server.base_url),
        ContextOptions(),
        MemorySession(),
        tmp_path,
        100_000,
        assume_yes=True,
    )
    finished: list[ev.ToolFinished] = []
    engine.on_event = lambda e: finished.append(e) if isinstance(e, ev.ToolFinished) else None

    engine.run_turn("read the log and the notes")

    big, small = finished
    assert big.offload is not None and big.content.startswith(
        f"📂 [offload:{big.offload.offload_id}]"
    )
    assert small.offload is None and small.content == "     1\tshort"
