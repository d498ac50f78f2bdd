"""The ``harness9`` command: parse, call, render. One place maps errors to exit codes.

This package must stay cheap to import: ``sessions list`` runs from cron and
must never pay for ``import litellm`` (seconds here). Model-calling code is
imported inside the commands that need it.

It is a package rather than one ``cli.py`` so each command group lives in a
module small enough to read in one sitting.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import traceback
from typing import Any

import typer
from typer.core import TyperGroup

from harness9 import __version__
from harness9.cli.env import Environment, environment
from harness9.errors import ExitCode, HarnessError

# `-h` is `--help` on every command and group; children inherit context_settings.
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
# What Typer raises for itself (help, usage errors, Exit, Abort): it reports these.
_FRAMEWORK_EXCEPTIONS = (typer.Exit, typer.Abort, typer.TyperException)


def _debug_enabled(ctx: typer.Context) -> bool:
    """``--debug`` (a root option) or ``HARNESS9_DEBUG``: show the traceback."""
    return bool(os.environ.get("HARNESS9_DEBUG") or ctx.find_root().params.get("debug"))


def report_error(ctx: typer.Context, message: str) -> None:
    """One line on stderr, the way every user-caused error is shown."""
    environment(ctx).echo(f"harness9: {message}", err=True)


class HarnessGroup(TyperGroup):
    """Maps exceptions to one stderr line and a named exit code, for every subcommand."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # Every error line suggests --debug, so it must work wherever it is typed:
        # `harness9 sessions show X --debug` as well as `harness9 --debug sessions ...`.
        # Only before a `--`, after which everything is an argument (a search for "--debug").
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            args = ["--debug"] + [a for i, a in enumerate(args) if i >= end or a != "--debug"]
        return super().parse_args(ctx, args)

    # Typer's Context class is public (typer.Context) but the base signature names its
    # vendored parent class, which is not: Any keeps the override compatible.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except HarnessError as exc:
            if _debug_enabled(ctx):
                traceback.print_exc()
            report_error(ctx, str(exc))
            ctx.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            environment(ctx).echo("", err=True)
            report_error(ctx, "interrupted")
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
            if isinstance(exc, _FRAMEWORK_EXCEPTIONS):
                raise  # --help, usage errors, typer.Exit: the framework reports these itself
            if _debug_enabled(ctx):
                traceback.print_exc()
                ctx.exit(int(ExitCode.ERROR))
            report_error(
                ctx,
                f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
            )
            ctx.exit(int(ExitCode.ERROR))


app = typer.Typer(
    name="harness9",
    cls=HarnessGroup,
    no_args_is_help=True,
    context_settings=CONTEXT_SETTINGS,
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
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        metavar="URL",
        help="Keep sessions in this PostgreSQL database (env HARNESS9_DATABASE_URL; "
        "config: database_url). Default: the SQLite file in $HARNESS9_HOME.",
    ),
) -> None:
    """harness9: chat with an LLM agent whose sessions survive restarts and never overflow."""
    from harness9.config import use_database_url

    if not isinstance(ctx.obj, Environment):
        ctx.obj = Environment.from_process()
    use_database_url(database_url)


# Registered after `app` exists; each command lives in its own module, which imports only
# what its --help needs (heavy imports live inside the command functions).
from harness9.cli.chat import chat  # noqa: E402
from harness9.cli.compact import compact  # noqa: E402
from harness9.cli.help import HarnessCommand  # noqa: E402
from harness9.cli.mcp import mcp_app  # noqa: E402
from harness9.cli.sessions import sessions_app  # noqa: E402

app.command("chat", cls=HarnessCommand)(chat)
app.command("compact", cls=HarnessCommand)(compact)
app.add_typer(
    sessions_app,
    name="sessions",
    help="Stored sessions: list, show, search, fork, export, import, migrate, delete.",
)
app.add_typer(
    mcp_app,
    name="mcp",
    help="List MCP servers and their tools; approve a project's .mcp.json servers.",
)


def main() -> None:
    """The console script (``harness9``) and ``python -m harness9``: the app, nothing else.

    Tests run this same app through Typer's CliRunner, so they parse exactly as users do.
    """
    status = [int(ExitCode.ERROR)]  # what an exception escaping the app would exit with
    # Registered first, so it runs last: after every other exit handler (litellm's flushes)
    # and after Python has joined the non-daemon threads.
    atexit.register(_skip_interpreter_teardown, status)
    try:
        app(prog_name="harness9")
        status[0] = int(ExitCode.OK)
    except SystemExit as exc:
        status[0] = _exit_status(exc.code)
        raise


def _exit_status(code: object) -> int:
    if code is None:
        return int(ExitCode.OK)
    if isinstance(code, int):
        return code
    return int(ExitCode.ERROR)  # Python prints a string code to stderr and exits 1


def _skip_interpreter_teardown(status: list[int]) -> None:
    """End the process without tearing the interpreter down, once litellm was loaded.

    By the time this runs the command has returned: sessions are saved and closed, the
    other exit handlers have run and the threads are joined. What is left is freeing
    litellm's thousands of objects one by one, ~2.5 s (more on a loaded machine) between
    the last line of output and the shell prompt. Nothing of it is needed; the streams
    are flushed and the process ends with the command's own exit status.
    """
    if "litellm" not in sys.modules:
        return  # a cheap command: its teardown is milliseconds, leave it as Python does it
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status[0])
