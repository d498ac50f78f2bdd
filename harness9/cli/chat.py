"""``harness9 chat``: the REPL. Only this path (and ``compact``) ever loads litellm."""

from __future__ import annotations

from typing import Annotated

import typer

from harness9.cli import options
from harness9.cli.chat_run import ChatFlags, run_chat, window_notes
from harness9.cli.env import environment
from harness9.cli.session_settings import given_on_command_line
from harness9.errors import UsageError

__all__ = ["chat", "window_notes"]

Resume = Annotated[
    str | None,
    typer.Option(
        "--resume",
        "-r",
        metavar="ID",
        help="Continue the session with this id (a unique prefix is enough), with the model, "
        "API base and window it last ran with unless flags say otherwise.",
    ),
]
Continue = Annotated[
    bool,
    typer.Option(
        "--continue",
        "-c",
        help="Continue the most recent session of this directory (else the most recent one), "
        "as it last ran unless flags say otherwise.",
    ),
]


def chat(
    ctx: typer.Context,
    prompt_arg: str | None = typer.Argument(
        None,
        metavar="PROMPT",
        help="Ask this, print the reply and exit (one turn; the session is kept).",
        show_default=False,
    ),
    prompt_opt: str | None = typer.Option(
        None,
        "--prompt",
        "-p",
        metavar="TEXT",
        help="Same as the PROMPT argument: one turn, reply on stdout, then exit.",
    ),
    model: options.Model = None,
    api_base: options.ApiBase = None,
    context_window: options.ContextWindow = None,
    resume: Resume = None,
    continue_: Continue = False,
    yes: bool = typer.Option(
        False,
        "--yes",
        "-y",
        help="Run shell commands and write files without asking for confirmation.",
    ),
    plain: bool = typer.Option(
        False,
        "--plain",
        help="Print replies as the model's exact text, not rendered Markdown (also NO_COLOR).",
    ),
    workdir: options.Workdir = None,
    no_stream: bool = typer.Option(
        False, "--no-stream", help="Wait for whole replies instead of streaming them."
    ),
    timeout: options.Timeout = None,
    strategy: options.Strategy = None,
    summary_model: options.SummaryModel = None,
    cache_ttl: options.CacheTtl = None,
    max_output_tokens: options.MaxOutputTokens = None,
    auto_compact: bool | None = typer.Option(
        None,
        "--auto-compact/--no-auto-compact",
        help="Compact automatically when the context fills up (config: compaction.auto; default on).",
    ),
) -> None:
    """Chat with the agent. Sessions are saved as you go; resume them with --resume or /resume.

    `harness9 chat "question"` (or -p) runs one turn and exits: the reply on
    stdout, token line and notices on stderr, exit code 1 if the turn failed.
    With stdin not a terminal, each input line is one user turn, replies go to
    stdout and token lines to stderr: `printf 'hi\\n' | harness9 chat`.
    In a terminal, Alt-Enter or a line ending in \\ continues the message on a
    new line, and a paste is sent as one message.
    """
    env = environment(ctx)
    flags = ChatFlags(
        one_shot=_one_shot(prompt_arg, prompt_opt),
        model=model,
        api_base=api_base,
        context_window=context_window,
        explicit=given_on_command_line(ctx, "model", "api_base", "context_window"),
        resume=resume,
        continue_=continue_,
        yes=yes,
        plain=plain,
        workdir=workdir,
        stream=not no_stream,
        timeout=float(timeout or options.DEFAULT_TIMEOUT_S),
        strategy=strategy,
        summary_model=summary_model,
        cache_ttl=cache_ttl,
        max_output_tokens=max_output_tokens,
        auto_compact=auto_compact,
    )
    if resume and continue_:
        raise UsageError("use either --resume ID or --continue, not both")
    raise typer.Exit(run_chat(env, flags))


def _one_shot(prompt_arg: str | None, prompt_opt: str | None) -> str | None:
    if prompt_arg is not None and prompt_opt is not None:
        raise UsageError("give the prompt either as an argument or with --prompt, not both")
    one_shot = prompt_arg if prompt_arg is not None else prompt_opt
    if one_shot is not None and not one_shot.strip():
        raise UsageError("the prompt is empty")
    return one_shot
