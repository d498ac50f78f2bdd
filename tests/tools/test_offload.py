import json
import os
import stat
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from freezegun import freeze_time

from harness9.store.offloads import OffloadError, OffloadNotFoundError
from harness9.store.session import OFFLOAD_MARKER
from harness9.tools.base import ToolContext
from harness9.tools.offload import OffloadConfig, OffloadStore
from harness9.tools.offload_recall import OffloadRecallTool

SID = "3f2b8c1e-9d4a-4e0b-8a7c-1234567890ab"


@pytest.fixture
def store(harness9_home: Path) -> OffloadStore:
    return OffloadStore()


def test_default_store_dir_is_under_harness9_home(store, harness9_home):
    assert store.store_dir == harness9_home / "offload_store"


def test_result_at_2000_tokens_stays_inline_and_2001_is_offloaded(store):
    # 8,000 ASCII bytes are 2,000 tokens: not over the limit; 8,004 bytes are 2,001.
    assert store.maybe_offload(SID, "bash", "{}", "x" * 8000) is None
    result = store.maybe_offload(SID, "bash", "{}", "x" * 8004)
    assert result is not None and result.token_size == 2001


def test_byte_limit_offloads_a_result_under_the_token_limit(tmp_path):
    store = OffloadStore(
        OffloadConfig(max_result_tokens=10_000, max_result_bytes=100, store_dir=tmp_path)
    )
    assert store.maybe_offload(SID, "bash", "{}", "y" * 100) is None
    assert store.maybe_offload(SID, "bash", "{}", "y" * 101) is not None


def test_token_limit_offloads_a_result_under_the_byte_limit(tmp_path):
    store = OffloadStore(
        OffloadConfig(max_result_tokens=10, max_result_bytes=10**6, store_dir=tmp_path)
    )
    assert store.maybe_offload(SID, "bash", "{}", "z" * 43) is None  # 10 tokens
    assert store.maybe_offload(SID, "bash", "{}", "z" * 44) is not None  # 11 tokens


def test_offload_writes_full_content_with_private_permissions(store):
    content = "line\n" * 3000
    result = store.maybe_offload(SID, "bash", "{}", content)
    assert result.file_path == store.store_dir / SID / f"{result.id}.txt"
    assert result.file_path.read_text() == content
    assert stat.S_IMODE(result.file_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(result.file_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.store_dir.stat().st_mode) == 0o700


def test_generated_ids_have_the_recall_shape_and_differ(store):
    a = store.maybe_offload(SID, "bash", "{}", "a" * 20000)
    b = store.maybe_offload(SID, "bash", "{}", "a" * 20000)
    assert a.id != b.id
    for r in (a, b):
        assert len(r.id) == 16 and r.id.startswith("ofl_") and int(r.id[4:], 16) >= 0


def test_summary_starts_with_marker_and_ends_with_recall_hint(store):
    result = store.maybe_offload(SID, "some_tool", "{}", "q" * 12000)
    assert result.summary.startswith(f"{OFFLOAD_MARKER}{result.id}] 3000 tokens offloaded\n")
    assert result.summary.endswith(f'use offload_recall(id="{result.id}") for the full content')


def test_read_file_summary_has_path_line_count_head_tail_and_names(store):
    body = "\n".join(f"    x_{i} = {i}" for i in range(1, 1000))
    content = "import os\ndef load_config():\n" + body + "\nclass Loader:\n    pass\n"
    args = json.dumps({"path": "src/loader.py"})
    summary = store.maybe_offload(SID, "read_file", args, content).summary
    assert "read_file src/loader.py: 1003 lines" in summary
    assert "defines: load_config, Loader" in summary
    assert "head:\n  import os\n  def load_config():" in summary
    assert "tail:\n      x_999 = 999\n  class Loader:\n      pass" in summary


def test_read_file_names_are_found_behind_line_numbers(store):
    content = (
        "".join(f"{i:6}\tvalue_{i} = {i}\n" for i in range(1, 800)) + "   800\tdef tail_fn():\n"
    )
    summary = store.maybe_offload(SID, "read_file", '{"path": "a.py"}', content).summary
    assert "defines: tail_fn" in summary


def test_grep_like_output_summary_has_match_count_and_first_three(store):
    content = "".join(f"src/mod{i}.py:{i}:    value = compute({i})\n" for i in range(600))
    summary = store.maybe_offload(SID, "bash", '{"command": "grep -rn compute"}', content).summary
    assert "bash: 600 matches\n" in summary
    assert "  src/mod0.py:0:    value = compute(0)\n  src/mod1.py:1:" in summary
    assert "src/mod3.py:3:" not in summary


def test_bash_summary_has_exit_code_from_metadata_and_last_five_lines(store):
    content = "".join(f"step {i}\n" for i in range(3000))
    result = store.maybe_offload(
        SID, "bash", '{"command": "make all"}', content, metadata={"exit_code": 2}
    )
    assert "bash `make all`: exit code 2, 3000 lines" in result.summary
    last = "\n".join(f"  step {i}" for i in range(2995, 3000))
    assert "last lines:\n" + last + "\n" in result.summary
    assert "step 2994" not in result.summary


def test_bash_summary_reads_exit_code_from_output_when_no_metadata(store):
    content = "out\n" * 3000 + "exit code: 127\n"
    assert "exit code 127" in store.maybe_offload(SID, "bash", "{}", content).summary


def test_bash_summary_of_a_timed_out_command_says_so_not_a_code_the_command_printed(store):
    content = "build\n" * 3000 + "exit code: 0\n" + "waiting\n" * 5  # a step passed, then a hang
    metadata = {"exit_code": None, "timed_out": True, "bytes": len(content)}
    summary = store.maybe_offload(SID, "bash", '{"command": "ci"}', content, metadata=metadata)
    assert "bash `ci`: timed out, 3006 lines" in summary.summary


def test_bash_summary_takes_the_exit_code_from_metadata_over_the_output(store):
    content = "out\n" * 3000 + "exit code: 0\n"  # the command's own line, not the tool's
    result = store.maybe_offload(SID, "bash", "{}", content, metadata={"exit_code": 3})
    assert "bash: exit code 3, 3001 lines" in result.summary


def test_generic_summary_is_first_300_characters(store):
    content = "".join(chr(ord("a") + i % 26) for i in range(20000))
    summary = store.maybe_offload(SID, "fetch_url", "{}", content).summary
    assert f"fetch_url: {content[:300]}…\n" in summary
    assert content[:301] not in summary


def test_recall_returns_short_content_whole(store):
    result = store.maybe_offload(SID, "bash", "{}", "é" * 6000)  # 12,000 bytes, 6,000 chars
    assert store.recall(SID, result.id) == "é" * 6000


def test_recall_caps_at_8000_characters_with_a_paging_note(store):
    content = "".join(str(i % 10) for i in range(20000))
    oid = store.maybe_offload(SID, "bash", "{}", content).id
    text = store.recall(SID, oid, limit=50_000)
    assert text == content[:8000] + (
        "\n\n[truncated: showing characters 0–8000 of 20000; "
        "call offload_recall with offset=8000 to continue]"
    )


def test_recall_pages_with_offset_to_the_end(store):
    content = "".join(str(i % 10) for i in range(20000))
    oid = store.maybe_offload(SID, "bash", "{}", content).id
    assert store.recall(SID, oid, offset=8000).startswith(content[8000:16000] + "\n\n")
    assert store.recall(SID, oid, offset=16000) == (
        content[16000:] + "\n\n[truncated: showing characters 16000–20000 of 20000]"
    )
    assert store.recall(SID, oid, offset=100, limit=10).startswith(content[100:110] + "\n\n")


def test_recall_past_the_end_is_an_error(store):
    oid = store.maybe_offload(SID, "bash", "{}", "k" * 20000).id
    with pytest.raises(OffloadError, match="past the end"):
        store.recall(SID, oid, offset=20000)


@pytest.mark.parametrize(
    "bad_id",
    [
        "../../etc/passwd",
        "ofl_../../x",
        "ofl_0123456789ab/../x",
        "OFL_0123456789AB",
        "ofl_0123",
        "",
    ],
)
def test_recall_refuses_malformed_ids(store, bad_id):
    with pytest.raises(OffloadNotFoundError):
        store.recall(SID, bad_id)


def test_recall_of_well_formed_unknown_id_is_not_found(store):
    with pytest.raises(OffloadNotFoundError, match="ofl_0123456789ab"):
        store.recall(SID, "ofl_0123456789ab")


def test_recall_is_scoped_to_the_session(store):
    oid = store.maybe_offload(SID, "bash", "{}", "s" * 20000).id
    with pytest.raises(OffloadNotFoundError):
        store.recall("other-session", oid)


@pytest.mark.parametrize("bad_session", ["../escape", "a/b", "", "x" * 200, "sess.id"])
def test_invalid_session_ids_never_name_a_directory(store, bad_session):
    with pytest.raises(OffloadError):
        store.maybe_offload(bad_session, "bash", "{}", "w" * 20000)
    assert not store.store_dir.exists()


def test_clean_session_removes_its_directory_only(store):
    a = store.maybe_offload(SID, "bash", "{}", "a" * 20000)
    b = store.maybe_offload("other_session", "bash", "{}", "b" * 20000)
    store.clean_session(SID)
    assert not (store.store_dir / SID).exists()
    assert b.file_path.exists()
    assert store.entries(SID) == [] and store.entries("other_session") == [b]
    with pytest.raises(OffloadNotFoundError):
        store.recall(SID, a.id)


def test_clean_session_unlinks_a_symlinked_directory_without_following_it(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("mine")
    store.store_dir.mkdir(parents=True)
    (store.store_dir / SID).symlink_to(outside)
    store.clean_session(SID)
    assert (outside / "precious.txt").read_text() == "mine"
    assert not (store.store_dir / SID).is_symlink()


@pytest.mark.parametrize("bad_session", ["..", "../escape", "a/b", ""])
def test_clean_session_of_an_id_that_names_no_directory_touches_nothing(
    store, tmp_path, bad_session
):
    store.store_dir.mkdir(parents=True)
    (store.store_dir.parent / "keep.txt").write_text("x")
    store.clean_session(bad_session)
    assert store.store_dir.is_dir() and (store.store_dir.parent / "keep.txt").exists()


def test_deleting_a_stored_session_removes_its_offloads_through_the_store_hook(store):
    from harness9.config import db_path
    from harness9.store import Manager
    from harness9.tools.offload import remove_session_offloads

    with Manager(db_path(), on_session_deleted=remove_session_offloads) as m:
        gone, kept = m.new_session().session_id, m.new_session().session_id
        for sid in (gone, kept):
            store.maybe_offload(sid, "bash", "{}", "z" * 20000)
        m.delete_session(gone)
    assert not (store.store_dir / gone).exists()
    assert (store.store_dir / kept).is_dir()


@freeze_time("2024-06-10 12:00:00", tz_offset=0)
def test_clean_stale_removes_session_dirs_older_than_seven_days(store):
    old = store.maybe_offload("old_session", "bash", "{}", "o" * 20000).file_path.parent
    young = store.maybe_offload("young_session", "bash", "{}", "y" * 20000).file_path.parent
    now = datetime(2024, 6, 10, 12, tzinfo=UTC)
    eight_days = (now - timedelta(days=8)).timestamp()
    six_days = (now - timedelta(days=6)).timestamp()
    os.utime(old, (eight_days, eight_days))
    os.utime(young, (six_days, six_days))
    assert store.clean_stale() == ["old_session"]
    assert not old.exists() and young.exists()


def test_clean_stale_without_a_store_dir_removes_nothing(store):
    assert store.clean_stale() == []


def test_stream_writer_keeps_only_head_and_tail_for_50_mb(store):
    chunk = (b"0123456789abcdef" * 16 + b"\n") * 1024  # 263,168 bytes, 1,024 lines
    rounds = 200  # ~50 MB
    tracemalloc.start()
    writer = store.open_stream(SID, "bash", '{"command": "cat big.log"}')
    for _ in range(rounds):
        writer.write(chunk)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    result = writer.finish(metadata={"exit_code": 0})
    assert result.file_path.stat().st_size == len(chunk) * rounds == 52_633_600
    assert result.token_size == 52_633_600 // 4
    assert "exit code 0, 204800 lines" in result.summary


def test_stream_writer_under_limits_can_inline_and_abort(store):
    writer = store.open_stream(SID, "bash", "{}")
    writer.write("small ")
    writer.write(b"output")
    assert writer.path.exists() and not writer.over_limits
    writer.abort()
    assert not writer.path.exists()
    with pytest.raises(OffloadError, match="already finished"):
        writer.write("more")


def test_stream_summary_matches_in_memory_summary_for_same_bytes(store):
    content = "".join(f"lib/a{i}.go:{i}:func Handler{i}() {{\n" for i in range(900))
    mem = store.maybe_offload(SID, "grep", "{}", content)
    writer = store.open_stream(SID, "grep", "{}")
    for i in range(0, len(content), 777):  # chunk boundaries split lines
        writer.write(content[i : i + 777])
    streamed = writer.finish()
    assert streamed.summary.replace(streamed.id, "ID") == mem.summary.replace(mem.id, "ID")


def _ctx(session_id: str = SID) -> ToolContext:
    return ToolContext(workdir=Path("."), session=None, session_id=session_id)


def test_recall_tool_returns_content_and_definition_names_id_required(store):
    oid = store.maybe_offload(SID, "bash", "{}", "r" * 20000).id
    tool = OffloadRecallTool(store)
    assert tool.definition().parameters["required"] == ["id"]
    result = tool.run({"id": oid, "offset": 19990}, _ctx())
    assert not result.is_error
    assert result.content.startswith("r" * 10 + "\n\n[truncated: showing characters 19990–20000")


def test_recall_tool_reports_unknown_id_as_error_result(store):
    result = OffloadRecallTool(store).run({"id": "../secrets"}, _ctx())
    assert result.is_error and "no offloaded result with id '../secrets'" in result.content


def test_recall_tool_needs_a_session_id(store):
    result = OffloadRecallTool(store).run({"id": "ofl_0123456789ab"}, _ctx(""))
    assert result.is_error and "session" in result.content
