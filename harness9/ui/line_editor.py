"""The interactive prompt: a prompt_toolkit line editor.

- Enter sends the message. A paste (the terminal's bracketed paste) arrives as
  one message however many lines it has: it lands in the buffer, Enter sends it.
- Alt-Enter (or Esc then Enter), Ctrl-J, or a line ending in ``\\`` continue
  the message on a new line.
- History persists in ``$HARNESS9_HOME/prompt_history``; Up/Down walk it.
- Tab completes slash commands at the start of the line.

prompt_toolkit is imported only here, when a terminal session starts (about
0.1 s); pipes keep the plain one-line-per-turn reader in ``repl.stdin_reader``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# The inputs of this process's line editors. prompt_toolkit reads keys in chunks, so keys
# typed right after Enter may already be read when the prompt returns; it keeps them for
# the next prompt ("type-ahead"), where no tcflush can reach them.
_inputs: weakref.WeakSet[Any] = weakref.WeakSet()


def discard_type_ahead() -> None:
    """Forget the keys a line editor read past the Enter that ended its last prompt."""
    if not _inputs:
        return
    from prompt_toolkit.input.typeahead import clear_typeahead

    for pt_input in list(_inputs):
        clear_typeahead(pt_input)


def private_file(path: Path) -> None:
    """Create ``path`` 0600 if missing, tighten it to 0600 if not: typed text (pasted
    secrets too) is nobody else's to read, as the session database is not."""
    import os

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _history(history_file: Path | None) -> Any:
    """The file-backed history (created 0600), or an in-memory one without a file."""
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    if history_file is not None:
        try:
            private_file(history_file)
            return FileHistory(str(history_file))
        except OSError:
            pass  # an unwritable home still gets an in-session history
    return InMemoryHistory()


def prompt_reader(
    commands: Iterable[str],
    history_file: Path | None = None,
    *,
    pt_input: Any = None,
    pt_output: Any = None,
    on_shown: Callable[[], Any] | None = None,
) -> PromptReader:
    """A ``read_line(prompt)`` backed by prompt_toolkit (EOFError on Ctrl-D, Ctrl-C raises).

    ``on_shown`` runs once, right after the first prompt is on the screen: chat
    starts importing litellm there, so the import does not slow the first draw.
    """
    from prompt_toolkit import PromptSession

    session: PromptSession[str] = PromptSession(
        history=_history(history_file),
        completer=_slash_completer(sorted(set(commands))),
        complete_while_typing=False,
        key_bindings=_key_bindings(),
        prompt_continuation=lambda width, line_number, wrap_count: "… ".rjust(width),
        input=pt_input,
        output=pt_output,
        # Colours and mouse stay the terminal's: the prompt is a plain "› ".
        mouse_support=False,
        enable_suspend=True,
    )

    _inputs.add(session.input)
    if on_shown is not None:
        pending = [on_shown]

        def first_render(_app: Any) -> None:
            while pending:
                pending.pop()()

        session.app.after_render += first_render

    return PromptReader(session)


class PromptReader:
    """``read_line(prompt)``; ``prefill(text)`` puts text in the next prompt, to send or edit
    (/rewind gives a message back this way)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._draft = ""

    def prefill(self, text: str) -> None:
        self._draft = text

    def __call__(self, prompt: str) -> str:
        draft, self._draft = self._draft, ""
        return str(self.session.prompt(prompt, default=draft))


def _slash_completer(names: list[str]) -> Any:
    """Tab completes a slash command typed at the start of the line."""
    from prompt_toolkit.completion import Completer, Completion

    class SlashCompleter(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Any:
            text = document.text_before_cursor
            if not text.startswith("/") or " " in text or "\n" in text:
                return
            for name in names:
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text))

    return SlashCompleter()


def _key_bindings() -> Any:
    """Enter sends (or applies a completion); Alt-Enter, Ctrl-J or a trailing \\ continue."""
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    @bindings.add("c-j")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    @bindings.add("enter")
    def _enter(event: Any) -> None:
        buffer = event.current_buffer
        if buffer.complete_state is not None and buffer.complete_state.current_completion:
            buffer.apply_completion(buffer.complete_state.current_completion)
            return
        doc = buffer.document
        if doc.is_cursor_at_the_end and doc.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
            return
        buffer.validate_and_handle()

    return bindings
