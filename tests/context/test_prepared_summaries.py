"""Summaries prepared in the background (docs/prepared-summaries.md), through `harness9 chat`
against the scripted server, whose summary calls are slow."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from harness9.config import ContextOptions, db_path, harness9_home
from harness9.context.policy import Attempt, ContextPolicy, Frame
from harness9.context.view import ModelView, load_view, prefix_digest, prefix_of
from harness9.context_events import (
    discard,
)
from harness9.engine import prepared
from harness9.engine.prepared import (
    AheadOfThreshold,
    PreparedAnswers,
    PreparedRun,
    prepared_ahead,
)
from harness9.schema import Message
from harness9.store import Manager
from harness9.store.backend import open_store
from harness9.tokens import estimate_tokens
from tests.support.cli import chat, cli, terminal
from tests.support.llm_server import ErrorReply, ScriptedLLMServer, TextReply, ToolCallsReply

WINDOW = "20000"
TURN_WORDS = "w" * 4800  # each reply: ~1,200 tokens; the context grows ~1,250 a call
WAITED = re.compile(r"\(prepared ahead, waited (\d+\.\d) s\)")


def is_summary_request(body: dict[str, Any]) -> bool:
    # Every chat request offers the agent's tools; a summariser's request has none.
    return not body.get("tools")


def summary_threads() -> list[threading.Thread]:
    """Every thread background summaries started (the event loop's included)."""
    return [t for t in threading.enumerate() if t.name.startswith("harness9-summary")]


def summary_workers() -> list[threading.Thread]:
    """The threads preparing a summary now."""
    return [t for t in summary_threads() if re.match(r"harness9-summary-\d", t.name)]


def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(autouse=True)
def prepare_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Preparing ahead is on by default; set here too, so that these tests hold whatever the
    default (one turns it off again)."""
    monkeypatch.setenv("HARNESS9_PREPARE_AHEAD", "true")


def write_config(text: str) -> None:
    harness9_home().mkdir(parents=True, exist_ok=True)
    (harness9_home() / "config.toml").write_text(text)


def turns(n: int, start: int = 0) -> str:
    return "".join(f"step {i}: go on\n" for i in range(start, start + n))


class Script:
    """Chat replies of ~600 tokens; summaries named SUMMARY-1, SUMMARY-2… in the order
    asked, each after ``delay`` seconds (or the ``fail`` error). With ``hold``, a chat
    request arriving while a summary is prepared waits until its worker has ended (the
    user and the agent going on meanwhile), so the summary is ready at the threshold."""

    def __init__(
        self,
        server: ScriptedLLMServer,
        *,
        delay: float = 0.0,
        hold: bool = False,
        fail: ErrorReply | None = None,
        until: Callable[[], bool] | None = None,
    ) -> None:
        self.server, self.delay, self.hold, self.fail = server, delay, hold, fail
        self.until = until
        self.summaries = 0
        self.lock = threading.Lock()
        server.respond_with(self)

    def __call__(self, body: dict[str, Any]) -> TextReply | ErrorReply:
        if is_summary_request(body):
            with self.lock:
                self.summaries += 1
                n = self.summaries
            if self.fail is not None:
                return self.fail
            if self.until is not None and n == 1:
                assert wait_until(self.until, timeout=120)
            return TextReply(f"**Goal:** SUMMARY-{n}", delay=self.delay)
        if self.hold and self.summaries:
            assert wait_until(lambda: not summary_workers())
        return TextReply(f"done. {TURN_WORDS}")


def summaries_before(name: str, server: ScriptedLLMServer) -> int:
    """Summary requests sent before the first request carrying ``name``."""
    reqs = server.requests
    applied = next(i for i, b in enumerate(reqs) if not is_summary_request(b) and name in str(b))
    return sum(1 for b in reqs[:applied] if is_summary_request(b))


class ScriptedReader:
    """The terminal's line editor, scripted: ``read(prompt)`` gives each line; text put
    back in the prompt (``/rewind``) is not used by these tests."""

    def __init__(self, read: Callable[[str], str]) -> None:
        self.read = read

    def __call__(self, prompt: str) -> str:
        return self.read(prompt)

    def prefill(self, text: str) -> None:
        pass


def keyboard(monkeypatch: pytest.MonkeyPatch, read: Callable[[str], str]) -> None:
    """The terminal's line reader, scripted: ``read(prompt)`` gives each line."""
    from harness9.ui import repl

    monkeypatch.setattr(repl, "terminal_reader", lambda *a, **k: ScriptedReader(read))


def summary_texts(server: ScriptedLLMServer) -> list[str]:
    """The summaries each chat request carried (in order)."""
    out = []
    for body in server.requests:
        if is_summary_request(body):
            continue
        found = re.findall(
            r"SUMMARY-\d+", " ".join(str(m.get("content")) for m in body["messages"])
        )
        out.append(found[0] if found else "")
    return out


def test_a_summary_prepared_ahead_is_applied_at_the_threshold_without_waiting(llm_server):
    script = Script(llm_server, delay=0.5, hold=True)

    result = chat(llm_server, turns(16), "--context-window", WINDOW)

    assert result.exit_code == 0, result.output
    waited = WAITED.findall(result.stderr)
    assert waited and set(waited) == {"0.0"}
    # Requests carried no summary, then the prepared ones from the compaction on.
    carried = summary_texts(llm_server)
    first = carried.index("SUMMARY-1")
    assert set(carried[:first]) == {""} and carried[first] == "SUMMARY-1"
    assert all(c.startswith("SUMMARY-") for c in carried[first:])
    # One summary asked for, several calls before the one that applied it.
    assert summaries_before("SUMMARY-1", llm_server) == 1
    asked = next(i for i, b in enumerate(llm_server.requests) if is_summary_request(b))
    applied = next(i for i, b in enumerate(llm_server.requests) if "SUMMARY-1" in str(b))
    assert applied - asked >= 3
    assert script.summaries >= 1


def turn_is_waiting() -> bool:
    """A thread of this process (the chat's turn) is waiting for a prepared summary."""
    for frame in sys._current_frames().values():
        f: Any = frame
        while f is not None:
            if f.f_code.co_name == "apply" and f.f_code.co_filename.endswith("prepared.py"):
                return True
            f = f.f_back
    return False


def test_a_summary_not_ready_at_the_threshold_is_waited_for_not_made_again(llm_server):
    # The summary is answered only once the turn at the threshold waits for it.
    script = Script(llm_server, delay=0.3, until=turn_is_waiting)

    started = time.monotonic()
    result = chat(llm_server, turns(16), "--context-window", WINDOW)
    elapsed = time.monotonic() - started

    assert result.exit_code == 0, result.output
    waited = WAITED.findall(result.stderr)[0]
    assert float(waited) >= 0.3
    assert summaries_before("SUMMARY-1", llm_server) == 1  # not made again
    assert "SUMMARY-1" in summary_texts(llm_server)
    assert script.summaries >= 1 and elapsed < 60


def test_with_prepare_ahead_off_the_turn_waits_for_the_whole_summary(llm_server, monkeypatch):
    monkeypatch.setenv("HARNESS9_PREPARE_AHEAD", "false")
    script = Script(llm_server, delay=0.3)

    result = chat(llm_server, turns(16), "--context-window", WINDOW)

    assert result.exit_code == 0, result.output
    assert script.summaries == 1
    assert "⚡ context compacted" in result.stderr and "prepared ahead" not in result.stderr


def test_a_prepared_summary_of_a_prefix_undone_since_is_thrown_away(llm_server):
    # Prepared from the 7th call (past 30 % and the 40 % target); /undo three times removes
    # the prefix's newest exchange.
    write_config("[compaction]\nprepare_ahead = true\nprepare_at = 0.3\n")
    script = Script(llm_server, hold=True)

    result = chat(
        llm_server,
        turns(7) + "/undo\n" * 3 + turns(12, 10) + "/context\n",
        "--context-window",
        WINDOW,
    )

    assert result.exit_code == 0, result.output
    assert script.summaries >= 2
    carried = summary_texts(llm_server)
    assert "SUMMARY-1" not in carried  # the summary of the undone prefix is never applied
    assert any(c.startswith("SUMMARY-") for c in carried)
    assert re.search(r"summaries prepared ahead\s+1 applied, 1 thrown away", result.output)
    assert_view_equals_a_fresh_build(llm_server)


def assert_view_equals_a_fresh_build(server: ScriptedLLMServer) -> None:
    """The last request's messages are the stored session's view built from scratch (the
    reply to it, stored since, left out)."""
    last = [b for b in server.requests if not is_summary_request(b)][-1]
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        session = m.open_session(info.id)
        view = load_view(session, Message("system", "sys"))
    sent = [(x["role"], x.get("content") or "") for x in last["messages"][1:]]
    built = [(x.role, x.content) for x in view.messages[1:-1]]
    assert sent == built


def test_a_failed_background_summary_falls_back_at_the_threshold_as_today(llm_server):
    script = Script(llm_server, fail=ErrorReply(400, "summaries are broken today"))

    result = chat(llm_server, turns(16), "--context-window", WINDOW)

    assert result.exit_code == 0, result.output
    # The background one failed silently; at the threshold the summary was asked for again
    # (as without preparation), failed again, and older messages were truncated.
    assert script.summaries >= 2
    [notice] = [ln for ln in result.stderr.splitlines() if "⚡ context compacted" in ln]
    assert "prepared ahead" not in notice
    assert "summary failed" in result.output and "summaries are broken today" in result.output
    failed_at = result.output.index("summary failed")
    turns_before = result.output[:failed_at].count("ctx ")
    assert turns_before >= 8  # at the threshold, not when the background one failed


def test_exit_while_a_summary_is_prepared_cancels_its_request_and_thread(llm_server):
    write_config("[compaction]\nprepare_ahead = true\nprepare_at = 0.45\n")
    script = Script(llm_server, delay=30.0)

    started = time.monotonic()
    result = chat(llm_server, turns(8) + "/exit\n", "--context-window", WINDOW)

    assert result.exit_code == 0, result.output
    assert script.summaries == 1
    assert time.monotonic() - started < 20  # /exit did not wait out the 30 s summary
    assert summary_threads() == []
    # The server saw the summary's connection closed before it answered.
    assert wait_until(lambda: len(llm_server.abandoned) == 1, timeout=5)
    assert is_summary_request(llm_server.abandoned[0])
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        assert m.open_session(info.id).latest_checkpoint() is None  # nothing half-written


def test_ctrl_c_at_the_prompt_cancels_the_summary_being_prepared(llm_server, monkeypatch):
    write_config("[compaction]\nprepare_ahead = true\nprepare_at = 0.45\n")
    script = Script(llm_server, delay=30.0)
    env = terminal()
    reads = iter(turns(8).splitlines())

    def read_line(_prompt: str) -> str:
        line = next(reads, None)
        if line is not None:
            return line
        if script.summaries and summary_workers():
            raise KeyboardInterrupt  # once, with the summary under way
        raise EOFError

    keyboard(monkeypatch, read_line)
    result = chat(llm_server, "", "--context-window", WINDOW, obj=env)

    assert result.exit_code == 0, env.stderr.getvalue()
    assert script.summaries == 1
    assert wait_until(lambda: len(llm_server.abandoned) == 1, timeout=5)
    assert summary_threads() == []


def test_the_token_line_says_a_summary_is_being_prepared(llm_server, monkeypatch):
    write_config("[compaction]\nprepare_ahead = true\nprepare_at = 0.45\n")
    Script(llm_server, delay=30.0)
    env = terminal()
    lines = iter([*turns(8).splitlines(), "/exit"])
    keyboard(monkeypatch, lambda _prompt: next(lines))

    result = chat(llm_server, "", "--context-window", WINDOW, obj=env)

    assert result.exit_code == 0, env.stderr.getvalue()
    lines = [ln for ln in env.stdout.getvalue().splitlines() if "ctx " in ln]
    assert "summary being prepared" not in lines[0]
    assert "summary being prepared" in lines[-1]


# -- the pure parts --------------------------------------------------------------------------


def view_of(*pairs: tuple[int, str]) -> ModelView:
    msgs = [Message("system", "s"), *(Message("user", text) for _, text in pairs)]
    return ModelView(msgs, [None, *(i for i, _ in pairs)])


def test_the_prefix_digest_changes_with_an_id_a_content_or_the_checkpoint():
    view = view_of((1, "a"), (2, "b"))
    base = prefix_digest(view, None)
    assert prefix_digest(view_of((1, "a"), (2, "b")), None) == base
    assert prefix_digest(view_of((1, "a"), (3, "b")), None) != base  # undone, retyped
    assert prefix_digest(view_of((1, "a"), (2, "c")), None) != base
    assert prefix_digest(view, (4, 2, 1.0)) != base  # another checkpoint under it


class RunAtOnce:
    """A ``Preparer`` running each preparation on the caller's thread, every summary "S"."""

    def start(self, run: PreparedRun) -> bool:
        run.run(lambda messages, tools: Message("assistant", "S"))
        return True


def consider(ahead: AheadOfThreshold, view: ModelView) -> bool:
    """Past the mark, needing a model: starts unless this prefix is prepared already."""
    return ahead.consider(
        "s1", view, None, 0, lambda calls: True, lambda msgs: True, lambda msgs: None, discard
    )


def test_a_prefix_unchanged_since_it_was_checked_is_not_hashed_again(monkeypatch):
    hashed: list[int] = []
    digest = prepared.prefix_digest
    monkeypatch.setattr(
        prepared, "prefix_digest", lambda v, key: hashed.append(len(v.ids)) or digest(v, key)
    )
    ahead = AheadOfThreshold(RunAtOnce(), PreparedAnswers(None), lookahead=1, share=0.5)
    first = view_of((1, "a"), (2, "b"))
    assert consider(ahead, first)
    # Each call: a new system message, the same rows, one more after them.
    rows = [*first.messages[1:], Message("user", "c")]
    grown = ModelView([Message("system", "s"), *rows], [None, 1, 2, 3])
    assert [consider(ahead, grown) for _ in range(3)] == [False, False, False]
    assert hashed == [3]  # when it started
    # The same rows read again (a rebuilt view): hashed once to tell, and still the prefix.
    assert not consider(ahead, view_of((1, "a"), (2, "b"), (3, "c")))
    assert hashed == [3, 3]
    assert ahead.discarded == {}
    assert consider(ahead, view_of((1, "a"), (2, "x"), (3, "c")))  # changed: prepared anew
    assert ahead.discarded == {"s1": 1}


def test_the_prefix_of_a_view_ends_at_its_last_id_or_is_none():
    view = view_of((1, "a"), (2, "b"), (3, "c"))
    prefix = prefix_of(view, 2)
    assert prefix is not None and prefix.ids == [None, 1, 2]
    assert prefix_of(view, 7) is None


def test_the_applied_checkpoint_equals_one_made_at_the_threshold_over_the_prefix(store_url):
    """Prepared (answers recorded), then applied over the same prefix with new messages
    after it: the checkpoint is the one the compaction of that prefix makes when made at
    once (counting, as the preparation does, the growth still to come before the
    threshold), and the new messages stay verbatim. Runs on both stores."""
    from harness9.engine.background import BackgroundSummaries

    with open_store(store_url) as manager:
        owner = BackgroundSummaries()
        model = Fixed()
        prepared = preparing_policy(
            ContextOptions(prepare_ahead=True, prepare_at=0.3), model, owner
        )
        made = _compacted(manager, prepared, ahead=True)
        owner.close()
        reference = _compacted(manager, ContextPolicy(ContextOptions(), model, 8000), ahead=False)
    assert made == reference
    assert model.calls == 2  # one summary each: the prepared one was not made again


def preparing_policy(
    opts: ContextOptions, model: Any, owner: Any, window: int = 8000
) -> ContextPolicy:
    """A policy of a ``window``-token window whose summaries of ``model`` are prepared ahead
    on ``owner``'s threads, made as the engine makes it."""
    from harness9.engine.background import BackgroundPreparer

    answers, ahead = prepared_ahead(opts, model, BackgroundPreparer(owner, model, lambda e: None))
    return ContextPolicy(opts, answers, window, ahead=ahead)


def test_after_the_server_names_a_smaller_window_the_prepared_summary_is_still_served(
    store_url,
):
    """The compactor made anew for the smaller window asks the same summariser: the summary
    is made once, in the background, and applied without a second model call."""
    from harness9.engine.background import BackgroundSummaries

    with open_store(store_url) as manager:
        owner, model = BackgroundSummaries(), Fixed()
        opts = ContextOptions(prepare_ahead=True, prepare_at=0.3)
        policy = preparing_policy(opts, model, owner, window=16000)
        assert policy.adopt_window(8000)
        _compacted(manager, policy, ahead=True)
        owner.close()
    assert model.calls == 1


class Fixed:
    """A summariser answering every request with the same text."""

    model = "fixed"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, messages: list[Message], tools: list[Any]) -> tuple[Message, None]:
        self.calls += 1
        return Message("assistant", "**Goal:** the prefix's summary"), None

    async def agenerate(self, messages: list[Message], tools: list[Any]) -> tuple[Message, None]:
        return self.generate(messages, tools)


def _compacted(manager: Any, policy: ContextPolicy, *, ahead: bool) -> tuple[Any, ...]:
    """Ten exchanges, compacted ahead (then two more, over the threshold) or at once (then
    the same two more): the checkpoint's content and the newest messages of the view."""
    s = manager.new_session()
    for i in range(10):
        s.add_messages([Message("user", f"ask {i} " + "q" * 800), Message("assistant", "a" * 800)])
    system = Message("system", "sys")
    if ahead:
        policy.prepare(s, system, [], [])  # past 30 % of the window: the preparation starts
        assert policy.ahead is not None and policy.ahead.preparing(s.session_id)
    else:  # the same prefix compacted now, the growth to the threshold counted
        view = load_view(s, system)
        to_come = policy.threshold_tokens - estimate_tokens(view.messages)
        comp = policy.compactor
        frame = Frame.of(system)
        assert policy._compact(Attempt(s, frame, view, comp, True, to_come, discard))
    s.add_messages([Message("user", "new " + "n" * 3000), Message("assistant", "b" * 3000)])
    s.add_messages([Message("user", "more " + "m" * 3000), Message("assistant", "c" * 3000)])
    if ahead:
        policy.prepare(s, system, [], [])  # over the threshold: applied
        assert policy.ahead is not None and policy.ahead.applied == {s.session_id: 1}
    cp = s.latest_checkpoint()
    assert cp is not None
    first = s.get_records()[0].id
    content = (cp.summary, cp.strategy, cp.recall, cp.instructions, cp.state, cp.stubs)
    newest = [m.content for m in load_view(s, system).messages[-4:]]
    return cp.last_message_id - first, repr(content).replace(str(first), "#"), newest


# -- sub-agents --------------------------------------------------------------------------------

SUB_MARK = "You are a sub-agent"
N_PARTS = 14


def test_a_sub_agent_applies_a_summary_prepared_ahead_in_its_own_session(
    llm_server, tmp_path, monkeypatch
):
    """With the defaults, the parent hands fourteen reads to a sub-agent (12K window,
    summaries without stubs); past 45 % of the window the sub-agent's summary is prepared
    while it goes on reading, then applied at its threshold: sub-agent requests came between
    the summary request and the first one carrying the summary, none made it again, and the
    summary is the child session's first checkpoint (on SQLite)."""
    monkeypatch.setenv("HARNESS9_OFFLOAD", "false")  # the parts stay in the context
    work = tmp_path / "w"
    work.mkdir()
    for i in range(N_PARTS):
        rows = "".join(f"part {i} row {j} value {j * 7919 % 1000}\n" for j in range(80))
        (work / f"part{i}.txt").write_text(rows)
    lock = threading.Lock()
    reads: list[int] = []
    asked: list[int] = []  # the index of each summary request among the server's requests

    def agents(body: dict[str, Any]) -> TextReply | ToolCallsReply:
        if is_summary_request(body):
            with lock:
                asked.append(len(llm_server.requests) - 1)
                n = len(asked)
            return TextReply(f"**Goal:** SUB-SUMMARY-{n} of the parts read", delay=0.3)
        if SUB_MARK in body["messages"][0]["content"]:
            if summary_workers():  # a preparation began: its request comes first, as unloaded
                assert wait_until(lambda: bool(asked))
            if asked:  # the sub-agent goes on only once the summary is prepared
                assert wait_until(lambda: not summary_workers())
            with lock:
                n = len(reads)
                reads.append(n)
            if n < N_PARTS:
                args = json.dumps({"path": f"part{n}.txt"})
                return ToolCallsReply(((f"r{n}", "read_file", args),))
            return TextReply("read all the parts")
        if body["messages"][-1]["role"] == "user":
            args = json.dumps({"prompt": "Read every part.", "description": "read parts"})
            return ToolCallsReply((("call_1", "task", args),))
        return TextReply("parent done")

    llm_server.respond_with(agents)
    result = chat(
        llm_server,
        "go\n",
        "--yes",
        "--no-stream",
        "--strategy",
        "summarize",
        "--context-window",
        "12000",
        workdir=work,
    )

    assert result.exit_code == 0, result.output
    requests = llm_server.requests
    assert asked  # the sub-agent's first summary, SUB-SUMMARY-1
    carrying = [
        i
        for i, b in enumerate(requests)
        if not is_summary_request(b) and "SUB-SUMMARY-1" in json.dumps(b["messages"])
    ]
    assert carrying and all(SUB_MARK in requests[i]["messages"][0]["content"] for i in carrying)
    between = requests[asked[0] + 1 : carrying[0]]
    # Prepared ahead: the sub-agent went on reading meanwhile, and no summary was made again.
    assert len([b for b in between if SUB_MARK in b["messages"][0]["content"]]) >= 2
    assert not any(is_summary_request(b) for b in between)
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    shown = json.loads(cli("sessions", "show", parent["id"], "--json").stdout)
    assert shown["checkpoints"] == []
    child = json.loads(cli("sessions", "show", shown["children"][0]["id"], "--json").stdout)
    assert "SUB-SUMMARY-1" in child["checkpoints"][0]["summary"]
    assert summary_threads() == []


def test_applied_over_its_prefix_the_tool_results_added_since_are_stubbed_as_at_the_threshold():
    """The prefix (six long exchanges) folds into the prepared summary; of the five tool
    groups added after it, the two oldest lose their results to stubs, as a compaction at
    the threshold stubs every group but the newest three, and the three stay whole."""
    from harness9.context.pipeline import HybridCompactor, OverPrefix
    from harness9.context.stubs import is_stub
    from harness9.schema import ToolCall

    prefix = [Message("system", "sys")]
    for i in range(6):
        prefix += [Message("user", f"ask {i} " + "q" * 2000), Message("assistant", "a" * 2000)]
    since: list[Message] = []
    for i in range(5):
        call = ToolCall(f"c{i}", "read_file", json.dumps({"path": f"f{i}.txt"}))
        since += [Message("assistant", "", [call]), Message("tool", f"{i}" * 2000, [], f"c{i}")]
    comp = HybridCompactor(Fixed(), 8000)

    result = OverPrefix(comp, len(prefix)).compact([*prefix, *since], force=True)

    alone = comp.compact(prefix, force=True)
    assert result.plan.cut == alone.plan.cut > 1 and result.summary == alone.summary
    results = [m for m in result.messages if m.role == "tool"]
    assert [is_stub(m) for m in results] == [True, True, False, False, False]
    assert [m.content for m in results[2:]] == ["2" * 2000, "3" * 2000, "4" * 2000]
    assert result.messages[: len(alone.messages)] == alone.messages
    assert result.plan.tokens_before == estimate_tokens([*prefix, *since])
    assert result.plan.tokens_after == estimate_tokens(result.messages)


class Held(Fixed):
    """``Fixed``, whose background answers wait until ``release`` is set (5 s at most)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def agenerate(self, messages: list[Message], tools: list[Any]) -> tuple[Message, None]:
        import asyncio

        deadline = time.monotonic() + 5
        while not self.release.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return self.generate(messages, tools)


def test_due_early_while_its_summary_is_prepared_the_call_goes_uncompacted_then_applies_it(
    store_url,
):
    """The smart trigger fires under the threshold while the prepared summary is still on
    its way: that call is sent as it is (nothing stored, no summary made again); the next
    one applies the prepared summary. Runs on both stores."""
    from harness9.engine.background import BackgroundSummaries

    owner, model = BackgroundSummaries(), Held()
    policy = preparing_policy(ContextOptions(prepare_ahead=True, prepare_at=0.45), model, owner)
    manager = open_store(store_url)
    try:
        s = manager.new_session()
        system = Message("system", "sys")
        sizes = []
        while policy.ahead is not None and not policy.ahead.preparing(s.session_id):
            s.add_messages([Message("user", "q" * 2000), Message("assistant", "a" * 2000)])
            sizes.append(policy.prepare(s, system, [], []).estimated)
        assert sizes[-1] < policy.threshold_tokens
        s.add_messages([Message("user", "q" * 2000), Message("assistant", "a" * 2000)])
        request = policy.prepare(s, system, [], [])  # the trigger: 2 calls of growth ahead

        assert request.estimated < policy.threshold_tokens
        assert request.estimated + 2 * (sizes[-1] - sizes[-2]) >= policy.threshold_tokens
        assert s.latest_checkpoint() is None and model.calls == 0
        model.release.set()
        assert wait_until(lambda: not summary_workers())
        s.add_messages([Message("user", "q" * 40), Message("assistant", "a" * 40)])
        policy.prepare(s, system, [], [])
        assert policy.ahead is not None and policy.ahead.applied == {s.session_id: 1}
        cp = s.latest_checkpoint()
        assert cp is not None and cp.summary == "**Goal:** the prefix's summary"
        assert model.calls == 1
    finally:
        policy.cancel_prepared(wait=True)
        owner.close()
        manager.close()
