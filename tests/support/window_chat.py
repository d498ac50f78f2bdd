"""``harness9 chat`` in-process against a scripted local server (tests/support/window_server.py),
fed notes of a known size, and the figures its token lines print."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from harness9.cli import app

runner = CliRunner()


def note(i: int, tokens: int = 300) -> str:
    """A note of about ``tokens`` tokens (bytes / 4), one line."""
    head = f"note {i}: "
    return head + f"remember the figure {i}. " * ((tokens * 4 - len(head)) // 24)


def chat(server, *lines: str, extra: tuple[str, ...] = ()) -> Result:
    """``chat`` on ``server`` (model ``openai/smol``), one line of input per message."""
    argv = ["chat", "--model", "openai/smol", "--api-base", server.base_url, "--yes", *extra]
    return runner.invoke(app, argv, input="".join(line + "\n" for line in lines))


def kilo(figure: str) -> float:
    """ "3.2K" -> 3200.0, "710" -> 710.0 (a token line's figure, "~" dropped)."""
    figure = figure.lstrip("~")
    return float(figure[:-1]) * 1000 if figure.endswith("K") else float(figure)
