"""The ``harness9`` command: parse, call, render. One place maps errors to exit codes.

This package must stay cheap to import: ``sessions list`` runs from cron and
must never pay for ``import litellm`` (seconds here). Model-calling code is
imported inside the commands that need it.

It is a package rather than one ``cli.py`` so each command group lives in a
module small enough to read in one sitting.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from harness9 import __version__
from harness9.errors import ExitCode, HarnessError

if TYPE_CHECKING:
    import click


def _debug_enabled(ctx: click.Context | None) -> bool:
    if os.environ.get("HARNESS9_DEBUG"):
        return True
    while ctx is not None:
        if ctx.params.get("debug"):
            return True
        ctx = ctx.parent
    return False


def report_error(message: str) -> None:
    """One line on stderr, the way every user-caused error is shown."""
    typer.echo(f"harness9: {message}", err=True)


def _framework_exceptions() -> tuple[type[BaseException], ...]:
    """What Typer/click raise for themselves (help, usage errors, Exit, Abort).

    Typer >= 0.25 vendors click and raises its own classes; older Typer raises
    click's. click is consulted only if something already imported it: importing
    it here would cost every command ~30 ms for nothing.
    """
    found: list[type[BaseException]] = [typer.Exit, typer.Abort]
    try:
        from typer.exceptions import TyperException

        found.append(TyperException)
    except ImportError:
        pass
    click_mod = sys.modules.get("click")
    if click_mod is not None:
        exc = click_mod.exceptions
        found += [exc.Exit, exc.Abort, exc.ClickException]
    return tuple(found)


class HarnessGroup(TyperGroup):
    """Maps exceptions to one stderr line and a named exit code, for every subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        # Every error line suggests --debug, so it must work wherever it is typed:
        # `harness9 sessions show X --debug` as well as `harness9 --debug sessions ...`.
        # Only before a `--`, after which everything is an argument (a search for "--debug").
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            args = ["--debug"] + [a for i, a in enumerate(args) if i >= end or a != "--debug"]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except HarnessError as exc:
            if _debug_enabled(ctx):
                traceback.print_exc()
            report_error(str(exc))
            ctx.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            typer.echo("", err=True)
            report_error("interrupted")
            ctx.exit(int(ExitCode.INTERRUPTED))
        except BrokenPipeError:
            # `harness9 sessions list | head` closing the pipe is not an error. Point stdout
            # at /dev/null so the flush at exit cannot fail again on the closed pipe.
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            sys.stderr.close()
            ctx.exit(int(ExitCode.OK))
        except Exception as exc:  # the per-command error boundary: never a raw traceback
            if isinstance(exc, _framework_exceptions()):
                raise  # --help, usage errors, typer.Exit: the framework reports these itself
            if _debug_enabled(ctx):
                traceback.print_exc()
                ctx.exit(int(ExitCode.ERROR))
            report_error(
                f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)"
            )
            ctx.exit(int(ExitCode.ERROR))


app = typer.Typer(
    name="harness9",
    cls=HarnessGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="A terminal agent harness: resumable chat sessions whose context never overflows.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"harness9 {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """harness9: chat with an LLM agent whose sessions survive restarts and never overflow."""


# Registered after `app` exists; each command lives in its own module, which imports only
# what its --help needs (heavy imports live inside the command functions).
from harness9.cli.chat import chat  # noqa: E402
from harness9.cli.compact import compact  # noqa: E402
from harness9.cli.help import HarnessCommand  # noqa: E402
from harness9.cli.sessions import sessions_app  # noqa: E402

app.command("chat", cls=HarnessCommand)(chat)
app.command("compact", cls=HarnessCommand)(compact)
app.add_typer(
    sessions_app,
    name="sessions",
    help="List, show, search, export, import and delete stored chat sessions.",
)


def main() -> None:
    from harness9.cli import fastparams

    command = typer.main.get_command(app)
    fastparams.install(command)  # plain options skip Typer's pydantic import (cron speed)
    command(prog_name="harness9")
