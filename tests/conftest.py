"""Shared fixtures: every test gets its own HARNESS9_HOME; nothing reaches the network."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.llm_server import ScriptedLLMServer

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
def workdir(tmp_path: Path) -> Path:
    """An empty directory for the agent to work in (its real path: the tools resolve it)."""
    d = tmp_path / "work"
    d.mkdir()
    return d.resolve()


@pytest.fixture
def llm_server(harness9_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLMServer]:
    """A started scripted OpenAI-compatible server; OPENAI_API_KEY is set to "sk-test"."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
def ollama_server(harness9_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A started scripted Ollama server (tests/support/ollama_server.py)."""
    from tests.support.ollama_server import ScriptedOllamaServer

    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    with ScriptedOllamaServer() as server:
        yield server


@pytest.fixture
def gemini_server(harness9_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A started scripted Gemini server (tests/support/gemini_server.py); GEMINI_API_KEY is set."""
    from tests.support.gemini_server import ScriptedGeminiServer

    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-key")
    with ScriptedGeminiServer() as server:
        yield server


# -- PostgreSQL: one throwaway cluster per test run --------------------------------------

_PG_REQUIRED = bool(os.environ.get("CI") or os.environ.get("HARNESS9_REQUIRE_POSTGRES"))


def _pg_unavailable(reason: str) -> None:
    # In CI (CI=true) a skipped PostgreSQL suite would pass unnoticed: fail instead.
    if _PG_REQUIRED:
        pytest.fail(f"PostgreSQL tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[object]:
    """A started PgCluster (tests/support/pg_server.py), stopped after the run."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _pg_unavailable("psycopg is not installed (pip install -e '.[dev]')")
    from tests.support.pg_server import PgCluster, find_binaries

    bin_dir, why = find_binaries()
    if bin_dir is None:
        _pg_unavailable(why)
    cluster = PgCluster(bin_dir)
    try:
        cluster.start()
    except (RuntimeError, OSError) as exc:
        cluster.stop()
        _pg_unavailable(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_database(pg_cluster) -> str:
    """The URL of a database with the harness9 schema, shared by the run's tests."""
    from harness9.store.postgres import PostgresManager

    url = pg_cluster.create_database("harness9_test")
    PostgresManager(url).close()  # migrate once
    return url


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The shared test database, emptied: every test starts with no session."""
    import psycopg

    with psycopg.connect(pg_database, autocommit=True) as conn:
        # Ids restart at 1, as in a new SQLite file.
        conn.execute(
            "TRUNCATE harness9.sessions, harness9.messages, harness9.todos, "
            "harness9.compactions, harness9.blobs, harness9.session_usage, "
            "harness9.compaction_details, harness9.session_settings, harness9.session_pins, "
            "harness9.session_forks, harness9.compaction_instructions, "
            "harness9.subagent_sessions, harness9.inherited_messages, harness9.todo_lists, "
            "harness9.compaction_data RESTART IDENTITY"
        )
    return pg_database


@pytest.fixture
def pg_fresh_url(pg_cluster, request: pytest.FixtureRequest) -> str:
    """A new, empty database (no harness9 schema yet): for migration tests."""
    import uuid

    return pg_cluster.create_database(f"fresh_{uuid.uuid4().hex[:12]}")


# -- one store-behaviour suite, both backends ------------------------------------------------
# A test that uses the ``backend`` fixture (directly or through ``store_url``) runs once per
# store, unless it also uses ``db`` (an SQLite file it inspects by hand) or is marked
# ``sqlite_only`` (it checks SQLite's own machinery).

BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames or "db" in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("sqlite_only"):
        return
    metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """An SQLite store's path in the test's temp dir (not created yet). A test that takes it
    inspects the file by hand, so it runs on SQLite only (see pytest_generate_tests)."""
    return tmp_path / "sessions.db"


@pytest.fixture
def manager(db: Path) -> Iterator[object]:
    """A Manager on ``db``, closed after the test."""
    from harness9.store import Manager

    with Manager(db) as m:
        yield m


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's store lives: an SQLite file path, or an emptied PostgreSQL database."""
    if backend == "postgres":
        return request.getfixturevalue("pg_url")
    return str(tmp_path / "sessions.db")


@pytest.fixture
def on_each_store(backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a module's tests on both stores through the CLI: the SQLite file of
    $HARNESS9_HOME, then PostgreSQL named by HARNESS9_DATABASE_URL. A module asks for it
    with ``pytestmark = pytest.mark.usefixtures("on_each_store")``."""
    if backend == "postgres":
        monkeypatch.setenv("HARNESS9_DATABASE_URL", store_url)
