"""The scripted server speaks the OpenAI chat-completions wire format (checked with raw HTTP)."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest

from tests.support.llm_server import NO_REPLY_MESSAGE, ScriptedLLMServer, TextReply


def post(server: ScriptedLLMServer, body: dict[str, Any]) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
    )
    return conn.getresponse()


def chat(stream: bool = False, include_usage: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def sse_events(resp: http.client.HTTPResponse) -> list[Any]:
    events: list[Any] = []
    for line in resp.read().decode().splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_base_url_is_loopback_with_an_ephemeral_port(llm_server: ScriptedLLMServer) -> None:
    assert llm_server.base_url == f"http://127.0.0.1:{llm_server.port}/v1"
    assert llm_server.port > 0


def test_non_streaming_reply_carries_message_and_usage(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("hello", usage=(12, 3))
    resp = post(llm_server, chat())
    data = json.loads(resp.read())
    assert resp.status == 200
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def test_every_request_body_and_header_is_recorded(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("a")
    llm_server.reply_text("b")
    post(llm_server, chat()).read()
    post(llm_server, {**chat(), "model": "second"}).read()
    assert [r["model"] for r in llm_server.requests] == ["test-model", "second"]
    assert llm_server.request_headers[0]["authorization"] == "Bearer sk-test"
    assert llm_server.pending == 0


def test_unscripted_request_fails_loudly_with_500(llm_server: ScriptedLLMServer) -> None:
    resp = post(llm_server, chat())
    assert resp.status == 500
    assert json.loads(resp.read())["error"]["message"] == NO_REPLY_MESSAGE


def test_stream_sends_text_in_pieces_then_usage_chunk_then_done(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_text("hello world", usage=(9, 4), chunk_size=4)
    resp = post(llm_server, chat(stream=True, include_usage=True))
    events = sse_events(resp)
    assert resp.getheader("Content-Type") == "text/event-stream"
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["choices"] == []
    assert final["usage"] == {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    pieces = [e["choices"][0]["delta"].get("content") for e in events[:-2]]
    assert [p for p in pieces if p] == ["hell", "o wo", "rld"]
    assert events[-3]["choices"][0]["finish_reason"] == "stop"


def test_stream_without_include_usage_sends_no_usage(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("hello")
    events = sse_events(post(llm_server, chat(stream=True)))
    assert all("usage" not in e for e in events[:-1])
    assert all(e["choices"] for e in events[:-1])


def test_streamed_tool_calls_split_arguments_and_index_parallel_calls(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_tool_calls(
        [("call_a", "bash", '{"command": "ls -la"}'), ("call_b", "read_file", '{"path": "x"}')]
    )
    events = sse_events(post(llm_server, chat(stream=True)))
    deltas = [tc for e in events[:-1] for tc in (e["choices"][0]["delta"].get("tool_calls") or [])]
    by_index: dict[int, list[dict[str, Any]]] = {}
    for tc in deltas:
        by_index.setdefault(tc["index"], []).append(tc)
    assert sorted(by_index) == [0, 1]
    assert by_index[0][0]["id"] == "call_a" and by_index[0][0]["function"]["name"] == "bash"
    args_pieces = [tc["function"]["arguments"] for tc in by_index[0][1:]]
    assert len(args_pieces) >= 2
    assert "".join(args_pieces) == '{"command": "ls -la"}'
    assert "".join(tc["function"]["arguments"] for tc in by_index[1]) == '{"path": "x"}'
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_error_reply_has_openai_error_body_and_headers(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(429, "slow down", code="rate_limit", headers={"Retry-After": "7"})
    resp = post(llm_server, chat())
    assert resp.status == 429
    assert resp.getheader("Retry-After") == "7"
    assert json.loads(resp.read())["error"] == {
        "message": "slow down",
        "type": "rate_limit_exceeded",
        "param": None,
        "code": "rate_limit",
    }


def test_stream_break_drops_the_connection_mid_body(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_stream_break("partial")
    resp = post(llm_server, chat(stream=True))
    with pytest.raises(http.client.IncompleteRead) as info:
        resp.read()
    assert b"parti" in info.value.partial


def test_empty_reply_has_empty_content_and_no_tool_calls(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_empty()
    message = json.loads(post(llm_server, chat()).read())["choices"][0]["message"]
    assert message == {"role": "assistant", "content": ""}


def test_responder_answers_first_and_falls_through_to_the_queue(
    llm_server: ScriptedLLMServer,
) -> None:
    def summarise_only(body: dict[str, Any]) -> TextReply | None:
        if "Summarize" in body["messages"][0]["content"]:
            return TextReply("a summary")
        return None

    llm_server.respond_with(summarise_only)
    llm_server.reply_text("chat answer")
    summary_body = {**chat(), "messages": [{"role": "user", "content": "Summarize this"}]}
    first = json.loads(post(llm_server, summary_body).read())
    second = json.loads(post(llm_server, chat()).read())
    assert first["choices"][0]["message"]["content"] == "a summary"
    assert second["choices"][0]["message"]["content"] == "chat answer"


def test_responder_may_return_plain_text(llm_server: ScriptedLLMServer) -> None:
    llm_server.respond_with(lambda body: f"you sent {len(body['messages'])} message(s)")
    data = json.loads(post(llm_server, chat()).read())
    assert data["choices"][0]["message"]["content"] == "you sent 1 message(s)"


def test_unknown_path_is_404(llm_server: ScriptedLLMServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", llm_server.port, timeout=5)
    conn.request("POST", "/v1/embeddings", body="{}")
    assert conn.getresponse().status == 404
    assert llm_server.requests == []


def test_stop_wakes_a_reply_waiting_in_a_delay() -> None:
    server = ScriptedLLMServer().start()
    server.reply_delay(30, then=TextReply("never"))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(chat()))
    while not server.requests:  # wait until the handler has taken the delayed reply
        time.sleep(0.01)
    server.stop()  # must return promptly, not after 30 s
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        conn.getresponse().read()
