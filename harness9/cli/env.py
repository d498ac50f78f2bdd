"""What a command may touch of the outside world, handed to it as one object.

Like httpie's ``Environment``: the streams, whether each is a terminal, the
Rich consoles and the clock. ``harness9``'s root callback builds one from the
process (``Environment.from_process()``) unless the caller passed one as the
Click ``obj``; tests pass their own (``runner.invoke(app, argv, obj=env)``)
instead of monkeypatching ``sys.stdin.isatty`` or Rich.

Rich is imported only when a console is asked for: ``sessions list`` from cron
must not pay for it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, TextIO

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from harness9.context.pipeline import CompactorFactory


def _isatty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        return False


def _now() -> float:
    # Looked up at each call, so a frozen or injected clock is seen.
    return time.time()


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


@dataclass(slots=True)
class Environment:
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    stdin_isatty: bool = False
    stdout_isatty: bool = False
    stderr_isatty: bool = False
    clock: Callable[[], float] = _now
    # Waits (retry backoff); tests inject one that records instead of sleeping.
    sleep: Callable[[float], None] = _sleep
    # Columns of the terminal stdout is, when it is one; None: do not wrap.
    columns: int | None = None
    # A program embedding harness9 (scripts/bench_session.py) may bring its own compactor:
    # factory(summarizer, context_window, threshold_tokens). Never set from the command line.
    compactor_factory: CompactorFactory | None = None
    _consoles: dict[str, Console] = field(default_factory=dict, repr=False)

    @classmethod
    def from_process(cls) -> Environment:
        """The process's streams as they are now (CliRunner swaps them during a test)."""
        stdout_tty = _isatty(sys.stdout)
        columns = None
        if stdout_tty:
            import shutil

            columns = shutil.get_terminal_size().columns
        return cls(
            stdin=sys.stdin,
            stdout=sys.stdout,
            stderr=sys.stderr,
            stdin_isatty=_isatty(sys.stdin),
            stdout_isatty=stdout_tty,
            stderr_isatty=_isatty(sys.stderr),
            columns=columns,
        )

    @property
    def interactive(self) -> bool:
        """A person at a terminal on both ends: prompts, colours, confirmations."""
        return self.stdin_isatty and self.stdout_isatty

    def echo(self, text: str = "", *, err: bool = False) -> None:
        """One line on stdout (or stderr), flushed."""
        typer.echo(text, file=self.stderr if err else self.stdout)

    def write(self, text: str) -> None:
        """Text on stdout exactly as given (no newline added)."""
        self.stdout.write(text)
        self.stdout.flush()

    def confirm(self, question: str, *, err: bool = False) -> bool:
        """Ask on stdout (or stderr, when stdout is for a program), read one line from
        stdin; only "y"/"yes" is a yes (EOF is a no)."""
        out = self.stderr if err else self.stdout
        out.write(f"{question} [y/N]: ")
        out.flush()
        answer = self.stdin.readline()
        if not answer:  # Ctrl-D: the terminal left the cursor after the question
            out.write("\n")
            out.flush()
        return answer.strip().lower() in ("y", "yes")

    def console(self, *, err: bool = False, soft_wrap: bool | None = None) -> Console:
        """The Rich console on stdout (or stderr), made once per environment and kind.

        ``soft_wrap`` defaults to "not a terminal": piped output is for programs and
        must never be hard-wrapped at an imagined 80 columns.
        """
        tty = self.stderr_isatty if err else self.stdout_isatty
        wrap = (not tty) if soft_wrap is None else soft_wrap
        key = f"{'err' if err else 'out'}:{wrap}"
        if key not in self._consoles:
            self._consoles[key] = _console_class()(
                file=self.stderr if err else self.stdout,
                # A terminal as the environment says; otherwise Rich decides (FORCE_COLOR).
                force_terminal=tty or None,
                highlight=False,
                soft_wrap=wrap,
                width=self.columns if (tty and not err) else None,
            )
        return self._consoles[key]


@cache
def _console_class() -> type[Console]:
    """Rich's Console, quiet on a closed pipe (made on first use: Rich is imported late)."""
    import os

    from rich.console import Console

    class PipeSafeConsole(Console):
        def on_broken_pipe(self) -> None:
            # Rich's default exits 1. A reader that stopped early (`show | head -1`) is
            # not an error: point stdout at /dev/null so nothing more fails, and let the
            # CLI's BrokenPipeError handler exit 0.
            devnull = os.open(os.devnull, os.O_WRONLY)
            if self.file is sys.stderr:
                # Only the diagnostics' reader went away: the command's work and its
                # output on stdout go on (a one-shot still answers and saves its turn).
                os.dup2(devnull, sys.stderr.fileno())
                os.close(devnull)
                return
            os.dup2(devnull, sys.stdout.fileno())
            raise BrokenPipeError

    return PipeSafeConsole


def environment(ctx: typer.Context) -> Environment:
    """The command's environment: the ``obj`` the root callback set (or a caller passed)."""
    env = ctx.find_root().obj
    if not isinstance(env, Environment):
        env = Environment.from_process()
        ctx.find_root().obj = env
    return env
