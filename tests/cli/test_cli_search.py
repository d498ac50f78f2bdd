"""``harness9 sessions search`` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

from freezegun import freeze_time
from rich.console import Console

from harness9.config import db_path
from harness9.schema import Message
from harness9.store import open_manager
from harness9.store.search import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, SearchHit
from harness9.ui.search_view import render_hits
from tests.support.cli import cli, run_cli


def make_session(*texts: str) -> str:
    with open_manager(db_path()) as m:
        s = m.new_session()
        s.add_messages(
            [Message("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
        )
        return s.session_id


def test_search_prints_a_numbered_hit_with_id_role_title_and_snippet():
    sid = make_session("Fix the parser in foo.py", "Done: the parser handles foo.py now")
    result = cli("sessions", "search", "foo.py", "handles")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"1. {sid}  ")
    assert "assistant #2  Fix the parser in foo.py" in lines[0]
    assert lines[1] == "   Done: the parser handles foo.py now"
    assert len(lines) == 2


def test_a_hit_is_numbered_as_sessions_show_numbers_the_message():
    make_session("one", "two", "three")  # row ids 1-3: the next session's rows start at 4
    sid = make_session("first", "the deploy worked")
    result = cli("sessions", "search", "deploy")
    assert "assistant #2  first" in result.stdout.splitlines()[0]
    (hit,) = json.loads(cli("sessions", "search", "deploy", "--json").stdout)
    assert (hit["message_id"], hit["number"]) == (5, 2)
    shown = cli("sessions", "show", sid).stdout
    assert "#2 assistant" in shown and "the deploy worked" in shown.split("#2 assistant")[1]


def test_search_json_gives_plain_snippet_with_highlight_offsets():
    with freeze_time("2026-05-17 14:30:00"):
        sid = make_session("deploy the api to staging")
    result = cli("sessions", "search", "staging", "--json")
    assert result.exit_code == 0
    (hit,) = json.loads(result.stdout)
    rank = hit.pop("rank")
    assert isinstance(rank, float)
    assert hit == {
        "session_id": sid,
        "message_id": 1,
        "number": 1,
        "role": "user",
        "created_at": "2026-05-17T14:30:00Z",
        "title": "deploy the api to staging",
        "snippet": "deploy the api to staging",
        "highlights": [[18, 25]],
    }


def test_search_phrase_in_quotes():
    make_session("the build is green", "green is the build")
    result = cli("sessions", "search", '"build is green"', "--json")
    assert [h["snippet"] for h in json.loads(result.stdout)] == ["the build is green"]


def test_search_limit_and_session_prefix():
    a = make_session("alpha one", "alpha two", "alpha three")
    make_session("alpha elsewhere")
    result = cli("sessions", "search", "alpha", "--session", a[:8], "--limit", "2", "--json")
    hits = json.loads(result.stdout)
    assert len(hits) == 2
    assert {h["session_id"] for h in hits} == {a}


def test_search_with_an_unbalanced_quote_is_a_one_line_usage_error():
    make_session("anything")
    result = cli("sessions", "search", '"unclosed phrase')
    assert result.exit_code == 2
    assert result.stderr == "harness9: search query has an unbalanced quote: '\"unclosed phrase'\n"
    assert result.stdout == ""


def test_search_a_query_starting_with_a_dash_after_double_dash():
    make_session("pass -x to stop at the first failure")
    result = cli("sessions", "search", "--json", "--", "-x")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)) == 1


def test_search_with_no_match_says_so():
    make_session("hello")
    assert cli("sessions", "search", "goodbye").stdout == "No matches.\n"


def test_search_on_a_fresh_home_finds_nothing_and_creates_nothing(harness9_home: Path):
    result = cli("sessions", "search", "anything", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == []
    assert not (harness9_home / "sessions.db").exists()


def test_search_of_an_unknown_session_is_not_found():
    make_session("hello")
    result = cli("sessions", "search", "hello", "--session", "0000dead")
    assert result.exit_code == 1
    assert result.stderr == "harness9: no session with id '0000dead'\n"


def test_sessions_deleted_by_age_are_not_found_by_search():
    with freeze_time("2026-01-01") as clock:
        make_session("quarterly report draft")
        clock.tick(40 * 86400)
        new = make_session("quarterly report final")
        assert cli("sessions", "delete", "--older-than", "30d", "--yes").exit_code == 0
    hits = json.loads(cli("sessions", "search", "quarterly", "--json").stdout)
    assert [(h["session_id"], h["snippet"]) for h in hits] == [(new, "quarterly report final")]


def test_sessions_deleted_by_id_are_not_found_by_search():
    gone = make_session("token sk-live-123")
    assert cli("sessions", "delete", gone, "--yes").exit_code == 0
    assert json.loads(cli("sessions", "search", "token", "--json").stdout) == []


def test_render_hits_numbers_hits_and_styles_matches():
    console = Console(record=True, width=200, force_terminal=True, color_system="standard")
    hit = SearchHit(
        "6f1c3a52-1b9e-4b52-9a86-0f3d5b3f9c11",
        7,
        "tool",
        0.0,
        "Run tests",
        f"3 {HIGHLIGHT_OPEN}passed{HIGHLIGHT_CLOSE}\x1b[2J",
        -1.5,
    )
    render_hits(console, [hit, hit])
    styled = console.export_text(styles=True, clear=False)
    text = console.export_text(styles=False)
    assert text.splitlines()[0].startswith("1. 6f1c3a52-1b9e-4b52-9a86-0f3d5b3f9c11  ")
    assert text.splitlines()[2].startswith("2. ")
    assert text.splitlines()[1] == "   3 passed\\x1b[2J"  # an escape is shown, never obeyed
    assert "\x1b[1;7mpassed" in styled


def test_at_a_60_column_terminal_hits_wrap_between_words_not_inside_them():
    console = Console(record=True, width=60, force_terminal=True, color_system=None)
    words = [f"word{n:02d}abc" for n in range(20)]
    hit = SearchHit(
        "6f1c3a52-1b9e-4b52-9a86-0f3d5b3f9c11", 7, "user", 0.0, "A title long enough " * 3,
        " ".join(words), -1.0,
    )  # fmt: skip
    render_hits(console, [hit])
    lines = console.export_text(styles=False).splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("1. 6f1c3a52") and lines[0].endswith("…")  # one line
    shown = " ".join(lines[1:]).split()
    assert shown == words  # every word whole, in order


def test_search_in_a_real_process():
    sid = make_session("benchmark the tokenizer")
    result = run_cli("sessions", "search", "tokenizer", "--json")
    assert result.returncode == 0, result.stderr
    assert [h["session_id"] for h in json.loads(result.stdout)] == [sid]
    bad = run_cli("sessions", "search", '"open')
    assert (bad.returncode, bad.stderr) == (
        2,
        "harness9: search query has an unbalanced quote: '\"open'\n",
    )


def test_a_first_search_over_many_unindexed_messages_says_so_once_on_stderr():
    sid = make_session("the nightly build broke")
    with open_manager(db_path()) as m, m.transaction() as conn:
        conn.execute(
            "WITH RECURSIVE k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k WHERE x < 25000) "
            "INSERT INTO messages (session_id, role, content, created_at) "
            "SELECT ?, 'user', 'filler ' || x, 1000.0 FROM k",
            (sid,),
        )
    first = cli("sessions", "search", "nightly")
    assert first.exit_code == 0
    assert first.stderr == "indexing 25,001 messages…\n"
    assert first.stdout.startswith(f"1. {sid}  ")
    again = cli("sessions", "search", "nightly")
    assert (again.exit_code, again.stderr) == (0, "")


def test_the_indexing_progress_bar_is_drawn_on_a_terminal_and_removed_when_done():
    from io import StringIO

    from harness9.ui.search_view import IndexProgress

    out = StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system=None)
    with IndexProgress(console, threshold=100) as progress:
        for done in range(0, 1001, 250):
            progress(done, 1000)
        assert progress.announced
    text = out.getvalue()
    assert text.startswith("indexing 1,000 messages…\n")
    assert "100%" in text or "━" in text
    quiet = StringIO()
    with IndexProgress(Console(file=quiet, force_terminal=True), threshold=100) as progress:
        progress(0, 99)
        progress(99, 99)
    assert quiet.getvalue() == ""
