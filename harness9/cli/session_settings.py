"""Which model, API base and window a stored session runs with: ``chat --continue``,
``chat --resume`` and ``compact`` decide it the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from harness9.config import Settings
    from harness9.store.session import SessionSettings


def given_on_command_line(ctx: typer.Context, *names: str) -> frozenset[str]:
    """Which of these parameters were typed as flags (not taken from the environment)."""

    def typed(name: str) -> bool:
        source = ctx.get_parameter_source(name)  # None, DEFAULT, ENVIRONMENT or COMMANDLINE
        return source is not None and source.name == "COMMANDLINE"

    return frozenset(n for n in names if typed(n))


def resolve_settings(
    stored: SessionSettings | None,
    *,
    model: str | None,
    api_base: str | None,
    context_window: int | None,
    explicit: frozenset[str],
) -> Settings:
    """A flag typed on the command line wins; otherwise what the session last ran with (it
    goes on as it was, like ``llm -c``); otherwise the environment and the defaults.

    A model switched by a flag keeps none of the stored window (it belonged to the old
    model), nor the stored API base (the new model may live elsewhere)."""
    from harness9.config import Settings

    if stored is not None:
        same_model = "model" not in explicit or model == stored.model
        if "model" not in explicit:
            model = stored.model
        if "api_base" not in explicit and stored.api_base and same_model:
            api_base = stored.api_base
        if "context_window" not in explicit and same_model and stored.context_window:
            context_window = stored.context_window
    return Settings.from_env(model=model, api_base=api_base, context_window=context_window)
