"""Options that ``chat`` and ``compact`` share, declared once.

Each is an ``Annotated`` type a command uses as a parameter's annotation. Where
an environment variable backs an option it is declared with ``envvar=``, so
Typer reads it, shows it in ``--help`` and reports a bad value the way it
reports a bad flag. (The compaction knobs' variables, such as
``HARNESS9_COMPACTION_STRATEGY``, are read by ``harness9.config`` with the
rest of the knobs, so config.toml < environment < flag holds for all of them.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness9.context.pipeline import strategy_help

Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        envvar="LLM_MODEL",
        show_default=False,
        help="Model to talk to, as litellm names it (default openai/gpt-4o-mini).",
    ),
]
ApiBase = Annotated[
    str | None,
    typer.Option(
        "--api-base",
        envvar="LLM_API_BASE",
        show_default=False,
        help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1.",
    ),
]


def _context_window(text: str) -> int:
    from harness9.config import parse_context_window

    return parse_context_window(text, "--context-window (HARNESS9_CONTEXT_WINDOW)")


# harness9's own parser, not Typer's int: one rule and one message for every form
# (4096, 4k, 32.8K, 1M), as the screen prints windows.
ContextWindow = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        metavar="TOKENS",
        envvar="HARNESS9_CONTEXT_WINDOW",
        parser=_context_window,
        show_default=False,
        help="Context window in tokens (4096, 32k, 32.8K, 1M); overrides the model map.",
    ),
]
# Seconds a model call may take before it is given up and retried, unless --timeout says.
DEFAULT_TIMEOUT_S = 120
Timeout = Annotated[
    int | None,
    typer.Option(
        "--timeout",
        min=1,
        metavar="SECONDS",
        envvar="HARNESS9_TIMEOUT",
        show_default=False,
        help=f"Give up on a model call after this long, then retry (default {DEFAULT_TIMEOUT_S}).",
    ),
]
Strategy = Annotated[
    str | None,
    typer.Option(
        "--strategy",
        show_default=False,
        help=f"Compaction: {strategy_help()}. Default: HARNESS9_COMPACTION_STRATEGY, "
        "else compaction.strategy in config.toml.",
    ),
]
SummaryModel = Annotated[
    str | None,
    typer.Option(
        "--summary-model",
        show_default=False,
        help="A cheaper model for summaries (default: HARNESS9_SUMMARY_MODEL, else "
        "compaction.model in config.toml, else the chat model).",
    ),
]
CacheTtl = Annotated[
    str | None,
    typer.Option(
        "--cache-ttl",
        metavar="5m|1h",
        show_default=False,
        help="Lifetime of the prompt-cache entries harness9 asks Claude for: 5m (the default) "
        "or 1h (writes cost 2x input instead of 1.25x). Default: HARNESS9_CACHE_TTL, else "
        "provider.cache_ttl in config.toml.",
    ),
]
MaxOutputTokens = Annotated[
    int | None,
    typer.Option(
        "--max-output-tokens",
        min=1,
        metavar="TOKENS",
        show_default=False,
        help="Longest reply to ask for (max_tokens), never above the model's limit; "
        "default 32000 (HARNESS9_MAX_OUTPUT_TOKENS, provider.max_output_tokens).",
    ),
]
Workdir = Annotated[
    Path | None,
    typer.Option(
        "--workdir",
        "-C",
        show_default=False,
        help="Directory the agent works in and whose AGENTS.md the system prompt includes; "
        "file tools cannot leave it (default: current).",
    ),
]
