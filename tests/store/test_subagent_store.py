"""Sub-agents' sessions in the store, on both backends: linked, listed, deleted and aged
with their parent, their usage summed into the parent's."""

from __future__ import annotations

import json

import pytest
from freezegun import freeze_time

from harness9.config import db_path
from harness9.schema import Message
from harness9.store.backend import open_url
from harness9.store.retention import apply_retention
from harness9.store.session import SubAgentLink
from tests.support.cli import cli

DAY = 86400.0
NOW = 1_780_000_000.0


def family(m, *, kids: int = 2):
    parent = m.new_session()
    parent.add_messages([Message("user", "explore")])
    children = []
    for i in range(kids):
        child = m.new_child_session(parent.session_id, f"call_{i}", f"look at part {i}")
        child.add_messages([Message("user", f"job {i} findneedle"), Message("assistant", "ok")])
        children.append(child.session_id)
    return parent.session_id, children


def test_a_child_session_names_its_parent_and_its_call(store_url):
    with open_url(store_url) as m:
        pid, (c0, c1) = family(m)
        assert m.subagent_link(c0) == SubAgentLink(c0, pid, "call_0", "look at part 0")
        assert m.subagent_link(pid) is None
        assert m.session_info(c1).parent_id == pid
        assert [(k.tool_call_id, i.id) for k, i in m.children(pid)] == [
            ("call_0", c0),
            ("call_1", c1),
        ]


def test_listing_shows_top_level_sessions_unless_children_are_asked_for(store_url):
    with open_url(store_url) as m:
        pid, kids = family(m)
        assert [i.id for i in m.list_sessions()] == [pid]
        assert sorted(i.id for i in m.list_sessions(children=True)) == sorted([pid, *kids])


def test_a_child_needs_a_stored_parent(store_url):
    from harness9.store.session import SessionNotFoundError

    with open_url(store_url) as m, pytest.raises(SessionNotFoundError):
        m.new_child_session("0" * 8 + "-0000-4000-8000-" + "0" * 12, "call_1")


def test_deleting_the_parent_deletes_its_children_and_tells_the_hook(store_url):
    deleted: list[str] = []
    with open_url(store_url, on_session_deleted=deleted.append) as m:
        pid, kids = family(m)
        other = m.new_session().session_id
        assert m.delete_sessions([pid]) == [pid]
        assert [i.id for i in m.list_sessions(children=True)] == [other]
        assert m.search("findneedle") == []
    assert sorted(deleted) == sorted([pid, *kids])


def test_deleting_a_child_keeps_the_parent(store_url):
    with open_url(store_url) as m:
        pid, (c0, c1) = family(m)
        m.delete_sessions([c0])
        assert [i.id for i in m.list_sessions()] == [pid]
        assert [k.session_id for k, _ in m.children(pid)] == [c1]


def test_retention_deletes_an_old_family_whole(store_url):
    with open_url(store_url) as m:
        with freeze_time(_utc(NOW - 40 * DAY)):
            pid, kids = family(m)
        assert apply_retention(m, 30, now=NOW) == [pid]
        assert m.list_sessions(children=True) == []


def test_retention_keeps_a_family_whose_child_is_recent(store_url):
    with open_url(store_url) as m:
        with freeze_time(_utc(NOW - 40 * DAY)):
            pid, (c0, _c1) = family(m)
        with freeze_time(_utc(NOW - 1 * DAY)):
            m.open_session(c0).add_messages([Message("user", "resumed later")])
        assert apply_retention(m, 30, now=NOW) == []
        assert len(m.list_sessions(children=True)) == 3


def test_older_than_deletes_families_not_lone_children(store_url):
    with open_url(store_url) as m:
        with freeze_time(_utc(NOW - 40 * DAY)):
            pid, kids = family(m)
        assert [i.id for i in m.sessions_older_than(NOW - 30 * DAY)] == [pid]
        assert m.delete_sessions([pid], updated_before=NOW - 30 * DAY) == [pid]
        assert m.list_sessions(children=True) == []


def test_the_sub_agents_usage_is_summed_apart(store_url):
    with open_url(store_url) as m:
        pid, (c0, c1) = family(m)
        m.add_usage(pid, input_tokens=100, output_tokens=10, cost_usd=0.001)
        m.add_usage(c0, input_tokens=1000, output_tokens=50, cost_usd=0.01)
        m.add_usage(c1, input_tokens=2000, output_tokens=70, cost_usd=None)
        sub = m.subagent_usage(pid)
        assert (sub.model_calls, sub.input_tokens, sub.output_tokens) == (2, 3000, 120)
        assert sub.cost_usd == pytest.approx(0.01) and sub.unpriced_calls == 1
        assert type(sub.input_tokens) is int and type(sub.cost_usd) is float
        assert m.usage_totals(pid).input_tokens == 100  # its own calls only
        assert m.subagent_usage(c0).model_calls == 0


def test_sessions_json_rolls_the_usage_up():
    with open_url(str(db_path())) as m:
        pid, (c0, _c1) = family(m)
        m.add_usage(pid, input_tokens=100, output_tokens=10)
        m.add_usage(c0, input_tokens=1000, output_tokens=50)
    (row,) = json.loads(cli("sessions", "list", "--json").stdout)
    assert (row["usage"]["input_tokens"], row["usage"]["subagents"]["input_tokens"]) == (1100, 1000)
    shown = json.loads(cli("sessions", "show", pid, "--json").stdout)
    assert shown["usage"]["model_calls"] == 2
    assert shown["usage"]["subagents"]["model_calls"] == 1


def _utc(ts: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC)


def test_export_and_import_carry_the_children(tmp_path):
    with open_url(str(db_path())) as m:
        pid, kids = family(m)
    out = tmp_path / "family.json"
    assert cli("sessions", "export", pid, "-o", str(out)).exit_code == 0
    doc = json.loads(out.read_text())
    assert [c["subagent"]["tool_call_id"] for c in doc["subagents"]] == ["call_0", "call_1"]
    assert all(c["subagent"]["parent_id"] == pid for c in doc["subagents"])
    assert cli("sessions", "delete", pid, "--yes").exit_code == 0
    imported = cli("sessions", "import", str(out))
    assert imported.exit_code == 0, imported.output
    assert "2 sub-agent sessions" in imported.stderr
    with open_url(str(db_path())) as m:
        assert [(k.session_id, k.description) for k, _ in m.children(pid)] == [
            (kids[0], "look at part 0"),
            (kids[1], "look at part 1"),
        ]
        assert m.open_session(kids[1]).get_messages()[0].content == "job 1 findneedle"
    copy = cli("sessions", "import", str(out), "--new-id")
    assert copy.exit_code == 0, copy.output
    with open_url(str(db_path())) as m:
        (other,) = [i.id for i in m.list_sessions() if i.id != pid]
        assert len(m.children(other)) == 2
        assert not set(k.session_id for k, _ in m.children(other)) & set(kids)


def test_an_export_whose_child_is_not_its_own_is_refused(tmp_path):
    with open_url(str(db_path())) as m:
        pid, _kids = family(m, kids=1)
    out = tmp_path / "family.json"
    cli("sessions", "export", pid, "-o", str(out))
    doc = json.loads(out.read_text())
    doc["subagents"][0]["subagent"]["parent_id"] = "0" * 8 + "-0000-4000-8000-" + "0" * 12
    out.write_text(json.dumps(doc))
    cli("sessions", "delete", pid, "--yes")
    result = cli("sessions", "import", str(out))
    assert result.exit_code == 1
    assert "subagents[0] is not a sub-agent of session" in result.stderr
    with open_url(str(db_path())) as m:
        assert m.list_sessions(children=True) == []


def test_retention_spares_the_family_of_a_kept_sub_agent_session(store_url):
    with open_url(store_url) as m:
        with freeze_time(_utc(NOW - 40 * DAY)):
            pid, (c0, _c1) = family(m)
        # `chat --resume CHILD` keeps the child it opens, and so its whole family.
        assert apply_retention(m, 30, now=NOW, keep=[c0]) == []
        assert len(m.list_sessions(children=True)) == 3
