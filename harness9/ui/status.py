"""The lines printed between turns: token budget, compaction notices, tool activity."""

from __future__ import annotations

from rich.text import Text

from harness9.engine.events import Compaction
from harness9.schema import Usage
from harness9.store.session import UsageTotals
from harness9.tokens import format_token_count
from harness9.ui.text import inert, plural


def usage_style(tokens: int, window: int) -> str:
    """green below 50 %, yellow 50-80 %, red from 80 %."""
    if window <= 0:
        return "green"
    share = tokens / window
    if share < 0.5:
        return "green"
    if share < 0.8:
        return "yellow"
    return "red"


def format_cost(dollars: float) -> str:
    """``$0.0012``, ``$0.42``, ``$12.30``: enough digits to see a cheap session move."""
    if 0 < dollars < 0.0001:
        return "<$0.0001"
    if dollars < 0.01:
        return f"${dollars:.4f}"
    return f"${dollars:.2f}"


def summaries_line(u: UsageTotals) -> str:
    """``2 calls, 12.0K in, 800 out, $0.0021``: the compaction summaries' part of the usage."""
    return calls_line(
        UsageTotals(
            model_calls=u.summary_calls,
            input_tokens=u.summary_input_tokens,
            output_tokens=u.summary_output_tokens,
            cost_usd=u.summary_cost_usd,
            unpriced_calls=u.summary_unpriced_calls,
        )
    )


def calls_line(u: UsageTotals) -> str:
    """``5 calls, 40.1K in, 900 out, $0.0100``: what some calls consumed (the sub-agents'
    part of a session's usage, or the summaries' through ``summaries_line``)."""
    line = (
        f"{plural(u.model_calls, 'call')}, {format_token_count(u.input_tokens)} in, "
        f"{format_token_count(u.output_tokens)} out"
    )
    if u.priced:
        line += f", {format_cost(u.cost_usd)}"
        if u.unpriced_calls:
            line += f" ({u.unpriced_calls} unpriced)"
    return line


def input_breakdown(input_tokens: int, cached: int, written: int) -> str:
    """``in 45.2K: 38.1K cached, 2.1K written``: prompt tokens and the prompt cache's part."""
    parts = [f"{format_token_count(cached)} cached"] if cached else []
    if written:
        parts.append(f"{format_token_count(written)} written")
    line = f"in {format_token_count(input_tokens)}"
    return f"{line}: {', '.join(parts)}" if parts else line


def token_line(
    model: str,
    session_id: str,
    tokens: int,
    window: int,
    *,
    estimated: bool = False,
    cost: float | None = None,
    usage: Usage | None = None,
    preparing: bool = False,
) -> Text:
    """``<model> │ session <id8> │ ctx 45.2K/128K (35%) │ in 45.2K: 38.1K cached │ $0.0123``.

    ``usage`` is the last call's, shown when the prompt cache took part in it; ``cost``
    is the session's cost so far; None (no known price) leaves it out. ``preparing``: a
    summary is being prepared in the background (`` │ summary being prepared``).
    """
    pct = round(100 * tokens / window) if window > 0 else 0
    approx = "~" if estimated else ""
    line = Text(f"{model} │ session {session_id[:8]} │ ", style="dim")
    line.append(
        f"ctx {approx}{format_token_count(tokens)}/{format_token_count(window)} ({pct}%)",
        style=usage_style(tokens, window),
    )
    if usage is not None and (usage.cached_tokens or usage.cache_write_tokens):
        breakdown = input_breakdown(
            usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens
        )
        line.append(f" │ {breakdown}", style="dim")
    if cost is not None:
        line.append(f" │ {format_cost(cost)}", style="dim")
    if preparing:
        line.append(" │ summary being prepared", style="dim")
    return line


def compaction_notice(c: Compaction) -> Text:
    """``⚡ context compacted — 12.5K → 6.2K tokens (45 → 22 messages)``."""
    text = Text(
        f"⚡ context compacted — {format_token_count(c.tokens_before)} → "
        f"{format_token_count(c.tokens_after)} tokens ({c.msgs_before} → {plural(c.msgs_after, 'message')})",
        style="bold magenta",
    )
    if c.fallback_reason:
        text.append(
            f"\n  summary failed ({inert(c.fallback_reason)}); older messages were truncated instead",
            style="yellow",
        )
    elif c.strategy and c.strategy != "summarize":
        text.append(f" [{c.strategy}]", style="dim")
    if c.waited is not None:
        text.append(f" (prepared ahead, waited {c.waited:.1f} s)", style="dim")
    return text


def tool_call_line(name: str, arguments: str, width: int = 100) -> Text:
    args = " ".join(inert(arguments).split())
    if len(args) > width:
        args = args[: width - 1] + "…"
    line = Text("→ ", style="cyan")
    line.append(name, style="bold cyan")
    line.append(f" {args}", style="cyan")
    return line


def tool_result_line(
    content: str, is_error: bool, width: int = 100, *, exit_code: int | None = None
) -> Text:
    """``  ✓ first line (+3 lines)``; a command that exited non-zero is a failure:
    ``  ✗ exit code 128 · fatal: not a git repository (+1 line)``."""
    lines = content.splitlines() or [""]
    first = inert(lines[0]).strip()
    if len(first) > width:
        first = first[: width - 1] + "…"
    extra = len(lines) - 1
    more = f" (+{extra} line{'' if extra == 1 else 's'})" if extra else ""
    failed = exit_code is not None and exit_code != 0
    mark, style = ("✗", "red") if is_error or failed else ("✓", "green")
    code = f"exit code {exit_code} · " if failed else ""
    return Text(f"  {mark} {code}{first}{more}", style=style)
