"""What a user typed or said stays theirs: the home 0700, the prompt history 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from harness9.config import db_path
from harness9.store import Manager
from harness9.ui.line_editor import prompt_reader
from tests.support.cli import chat


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask():
    old = os.umask(0o022)  # the common default: new files 0644, directories 0755
    yield
    os.umask(old)


def type_one_line(history: Path) -> None:
    with create_pipe_input() as pipe:
        pipe.send_text("my password is hunter2\r")
        read = prompt_reader(["/help"], history, pt_input=pipe, pt_output=DummyOutput())
        assert read("› ") == "my password is hunter2"


def test_a_new_prompt_history_is_readable_by_its_owner_only(harness9_home: Path):
    history = harness9_home / "prompt_history"

    type_one_line(history)

    assert "hunter2" in history.read_text()
    assert mode(history) == 0o600
    assert mode(harness9_home) == 0o700


def test_an_existing_world_readable_prompt_history_is_tightened(harness9_home: Path):
    harness9_home.mkdir(mode=0o700)
    history = harness9_home / "prompt_history"
    history.write_text("\n# old\n+ls\n")
    os.chmod(history, 0o644)

    type_one_line(history)

    assert mode(history) == 0o600
    assert history.read_text().startswith("\n# old\n+ls\n")  # nothing typed before is lost


def test_an_existing_open_home_is_made_private_like_the_database(llm_server, harness9_home):
    harness9_home.mkdir()
    os.chmod(harness9_home, 0o755)
    Manager(db_path()).close()
    llm_server.reply_text("hello")

    result = chat(llm_server, "hi\n")

    assert result.exit_code == 0, result.output
    assert mode(harness9_home) == 0o700
    assert mode(db_path()) == 0o600
