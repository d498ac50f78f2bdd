"""Shared fixtures: every test gets its own HARNESS9_HOME; nothing reaches the network."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from llm_server import ScriptedLLMServer

# Shared CI machines are noisy: no deadlines, and a fixed example budget.
settings.register_profile(
    "ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=50)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# litellm fetches a price map over the network at import unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

# Provider variables a developer's shell may hold; every HARNESS9_* and LLM_* one goes too.
_MODEL_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "ANTHROPIC_API_KEY",
)


@pytest.fixture(autouse=True)
def harness9_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "h9home"
    for name in list(os.environ):
        if name.startswith(("HARNESS9_", "LLM_")) or name in _MODEL_ENV:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HARNESS9_HOME", str(home))
    return home


@pytest.fixture
def llm_server(harness9_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLMServer]:
    """A started scripted OpenAI-compatible server; OPENAI_API_KEY is set to "sk-test"."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedLLMServer() as server:
        yield server
