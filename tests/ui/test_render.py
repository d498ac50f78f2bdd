"""Renderers of stored sessions: plain listing lines and the Rich session view."""

from __future__ import annotations

import io

from rich.console import Console

from harness9.schema import Message, ToolCall
from harness9.store import SessionInfo, StoredMessage
from harness9.store.session import UsageTotals
from harness9.ui.listing import session_lines
from harness9.ui.render import render_message
from harness9.ui.status import calls_line, summaries_line
from harness9.ui.text import inert

SID = "0b6c7a2e-0000-4000-8000-000000000001"


def info(title: str, count: int = 3) -> SessionInfo:
    return SessionInfo(SID, 0.0, 0.0, count, title)


def test_listing_has_a_header_and_one_line_per_session():
    lines = session_lines([info("first"), info("second", 12345)])
    assert lines[0].split() == ["ID", "UPDATED", "MSGS", "TITLE"]
    assert lines[1].startswith(SID) and lines[1].endswith("     3  first")
    assert lines[2].endswith("12345  second")


def test_listing_cuts_lines_to_the_terminal_width():
    lines = session_lines([info("a long title " * 5)], width=70)
    assert all(len(ln) <= 70 for ln in lines)
    assert lines[1].endswith("…")
    assert SID in lines[1]


def test_at_60_columns_the_listing_keeps_the_title_behind_a_short_id():
    lines = session_lines([info("Refactor the parser")], width=60)
    assert all(len(ln) <= 60 for ln in lines)
    assert lines[1].startswith(SID[:8] + "  ") and SID not in lines[1]
    assert "Refactor the parser" in lines[1]


def test_listing_neutralises_bidi_overrides_in_titles():
    assert "?evil" in session_lines([info("\u202eevil")])[1]


def test_inert_escapes_controls_but_keeps_newlines_and_tabs():
    assert inert("a\x1b[2Jb\tc\nd\x00\u2066") == "a\\x1b[2Jb\tc\nd\\x00\\u2066"


def test_message_markup_is_printed_literally():
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    call = ToolCall("c1", "bash", '{"cmd": "[red]rm[/red]"}')
    render_message(
        console, StoredMessage(7, Message("assistant", "[bold]hi[/bold] :smile:", [call]), 0.0)
    )
    text = out.getvalue()
    assert "#7 assistant" in text
    assert "[bold]hi[/bold] :smile:" in text
    assert '→ bash({"cmd": "[red]rm[/red]"})  [c1]' in text


def test_the_summaries_usage_line_counts_only_summary_calls_and_their_unpriced_ones():
    u = UsageTotals(
        model_calls=9,
        input_tokens=90_000,
        output_tokens=4_000,
        cost_usd=0.5,
        summary_calls=3,
        summary_input_tokens=12_300,
        summary_output_tokens=800,
        summary_cost_usd=0.0021,
        summary_unpriced_calls=1,
    )
    assert summaries_line(u) == "3 calls, 12.3K in, 800 out, $0.0021 (1 unpriced)"


def test_a_usage_line_of_calls_none_of_them_priced_shows_no_cost():
    assert calls_line(UsageTotals(1, 500, 20, unpriced_calls=1)) == "1 call, 500 in, 20 out"
    u = UsageTotals(summary_calls=2, summary_input_tokens=100, summary_unpriced_calls=2)
    assert summaries_line(u) == "2 calls, 100 in, 0 out"
