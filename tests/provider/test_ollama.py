"""Ollama through the real CLI and litellm, against tests/support/ollama_server.py.

What a user of a local Ollama meets: the window harness9 works with is the one Ollama runs
(``options.num_ctx`` in every request, the summariser's too), the server is asked for the
window of every Ollama name, a history longer than Ollama's default is not silently cut,
and a prompt count the server left out is shown as an estimate.
"""

from __future__ import annotations

import json
import re
import urllib.request

from harness9.provider.ollama import request_options, server_root, window_from_show
from tests.support.cli import cli, piped
from tests.support.ollama_server import OLLAMA_DEFAULT_NUM_CTX, ScriptedOllamaServer


def ollama_chat(server: ScriptedOllamaServer, *args: str, model: str, stdin: str = ""):
    env = piped(stdin)
    result = cli("chat", "--model", model, "--api-base", server.base_url, *args, obj=env)
    return result, env.stdout.getvalue(), env.stderr.getvalue()


def post(server: ScriptedOllamaServer, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        server.base_url + path, data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            lines = response.read().decode().splitlines()
            return response.status, json.loads(lines[-1])
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# -- num_ctx -------------------------------------------------------------------------------


def test_every_request_of_a_session_carries_num_ctx_equal_to_the_window(ollama_server, tmp_path):
    ollama_server.show_model("llama3.1", 131072)
    ollama_server.reply_tool_calls([("c1", "bash", '{"command": "echo hi"}')])
    ollama_server.reply_text("it printed hi")
    ollama_server.reply_text("second answer")
    first, out, _ = ollama_chat(
        ollama_server,
        "--context-window",
        "32768",
        "--yes",
        "--workdir",
        str(tmp_path),
        "-p",
        "say hi",
        model="ollama_chat/llama3.1",
    )
    again, out2, _ = ollama_chat(
        ollama_server,
        "--context-window",
        "32768",
        "--continue",
        "-p",
        "and?",
        model="ollama_chat/llama3.1",
    )

    assert first.exit_code == again.exit_code == 0
    assert out.strip() == "it printed hi" and out2.strip() == "second answer"
    assert ollama_server.num_ctx_sent == [32768, 32768, 32768]
    assert ollama_server.truncated == [0, 0, 0]
    assert ollama_server.show_requests == []  # a window given is not asked
    assert all(body["stream"] is True for body in ollama_server.requests)  # streamed


def test_the_generate_route_of_ollama_models_carries_num_ctx_too(ollama_server, tmp_path):
    ollama_server.show_model("qwen2.5-coder", 16384)
    ollama_server.reply_tool_calls([("c1", "bash", '{"command": "echo hi"}')])
    ollama_server.reply_text("done")
    result, out, _ = ollama_chat(
        ollama_server,
        "--yes",
        "--workdir",
        str(tmp_path),
        "-p",
        "go",
        model="ollama/qwen2.5-coder",
    )

    assert result.exit_code == 0 and out.strip() == "done"
    assert ollama_server.num_ctx_sent == [16384, 16384]  # the window the server reported
    assert all(body["prompt"] for body in ollama_server.requests)  # /api/generate's shape


def test_a_session_that_compacts_sends_num_ctx_in_its_summary_request_too(ollama_server):
    ollama_server.show_model("llama3.1", 131072)
    ollama_server.respond_with(
        lambda body: "**Goal:** a long chat" if not body.get("tools") else None  # the summary
    )
    # Varied text (~170 tokens a message): 4096 is passed after a few turns.
    lines = [f"message {i} " + " ".join(f"word{i}-{j}" for j in range(80)) for i in range(12)]
    for i in range(12):
        ollama_server.reply_text(f"reply {i} " + " ".join(f"answer{i}-{j}" for j in range(80)))
    stdin = "\n".join(lines) + "\n"
    result, out, err = ollama_chat(
        ollama_server, "--context-window", "4096", model="ollama_chat/llama3.1", stdin=stdin
    )

    assert result.exit_code == 0, err
    assert "context compacted" in err
    summaries = [b for b in ollama_server.requests if not b.get("tools")]
    assert summaries and len(ollama_server.requests) == 12 + len(summaries)
    assert ollama_server.num_ctx_sent == [4096] * len(ollama_server.requests)
    assert ollama_server.truncated == [0] * len(ollama_server.requests)  # nothing lost, ever
    assert max(ollama_server.prompt_tokens) > OLLAMA_DEFAULT_NUM_CTX  # Ollama's default would
    assert out.splitlines()[-1].startswith("reply 11 ")


def test_without_num_ctx_the_server_drops_the_oldest_messages_as_ollama_does(ollama_server):
    # The failure num_ctx prevents, shown on the server itself.
    ollama_server.show_model("llama3.1", 131072)
    ollama_server.reply_text("ok")
    ollama_server.reply_text("ok")
    history = [{"role": "system", "content": "be brief"}] + [
        {"role": "user", "content": f"{i} " + "y" * 2000} for i in range(8)
    ]
    body = {"model": "llama3.1", "messages": history, "stream": False}
    status, _ = post(ollama_server, "/api/chat", body)
    status2, _ = post(ollama_server, "/api/chat", {**body, "options": {"num_ctx": 8192}})

    assert status == status2 == 200
    assert OLLAMA_DEFAULT_NUM_CTX == 2048
    assert ollama_server.truncated == [4, 0]  # ~508 tokens each: 4 of 8 fit 2048 with the system
    assert ollama_server.prompt_tokens[0] <= 2048 < ollama_server.prompt_tokens[1]


def test_num_ctx_is_only_for_ollama_models():
    assert request_options("ollama_chat/llama3.1", 32768) == {"num_ctx": 32768}
    assert request_options("ollama/llama3.1", 8192) == {"num_ctx": 8192}
    assert request_options("openai/llama3.1", 32768) == {}
    assert request_options("ollama_chat/llama3.1", None) == {}


# -- the window asked of the server --------------------------------------------------------


def test_a_name_litellm_maps_is_asked_of_the_server_too(ollama_server):
    # litellm's map says 8192 for ollama/llama3.1 and would never ask the server.
    ollama_server.show_model("llama3.1", 32768)
    ollama_server.reply_text("hi")
    result, _, err = ollama_chat(ollama_server, "-p", "hello", model="ollama_chat/llama3.1")

    assert result.exit_code == 0, err
    assert ollama_server.show_requests == [{"model": "llama3.1"}]
    assert "the context window of ollama_chat/llama3.1 is 32.8K, as its server reports" in err
    assert "sent as num_ctx" in err and "assuming" not in err
    assert re.search(r"ctx [\d.]+K?/32\.8K", err)
    assert ollama_server.num_ctx_sent == [32768]


def test_a_num_ctx_in_the_modelfile_is_the_window_the_server_runs():
    details = {
        "parameters": 'stop "<|eot_id|>"\nnum_ctx                        16384',
        "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
    }
    assert window_from_show(details) == 16384
    assert window_from_show({"model_info": {"qwen2.context_length": 32768}}) == 32768
    assert window_from_show({"model_info": {"general.architecture": "x"}}) is None


def test_the_server_is_found_as_litellm_finds_it(monkeypatch):
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    assert server_root(None) == "http://localhost:11434"
    assert server_root("http://gpu-box:11434/api/chat/") == "http://gpu-box:11434"
    monkeypatch.setenv("OLLAMA_API_BASE", "http://other:11434")
    assert server_root(None) == "http://other:11434"


# -- usage ---------------------------------------------------------------------------------


def test_a_prompt_count_the_server_left_out_is_shown_as_an_estimate(ollama_server):
    ollama_server.show_model("llama3.1", 8192)
    ollama_server.reply_text("counted", usage=(1234, 5))
    ollama_server.reply_text("not counted")
    counted, _, err = ollama_chat(ollama_server, "-p", "one", model="ollama_chat/llama3.1")
    ollama_server.omit_prompt_count = True
    omitted, _, err2 = ollama_chat(ollama_server, "-p", "two", model="ollama_chat/llama3.1")

    assert counted.exit_code == omitted.exit_code == 0
    assert "ctx 1.2K/8.2K (15%)" in err  # the server's own count, as it is
    assert re.search(r"ctx ~[\d.]+K?/8\.2K", err2)  # litellm's stand-in is not shown as real


# -- the wire, as the real API answers -------------------------------------------------------


def test_a_model_not_pulled_is_a_404_naming_it(ollama_server):
    result, _, err = ollama_chat(ollama_server, "-p", "hi", model="ollama_chat/nothere")

    assert result.exit_code == 1
    assert 'model "nothere" not found, try pulling it first' in err
    assert "b'" not in err and "Exception" not in err
    assert "--api-base" not in err.split("error:", 1)[1]  # the address was right


def test_a_base_ending_in_v1_gets_the_form_ollama_expects(ollama_server):
    ollama_server.show_model("llama3.1", 8192)
    env = piped()
    argv = ["chat", "--model", "ollama_chat/llama3.1", "--api-base", ollama_server.base_url + "/v1"]
    result = cli(*argv, "--context-window", "8192", "-p", "hi", obj=env)
    line = env.stderr.getvalue().strip().splitlines()[-1]

    assert result.exit_code == 1
    assert line.startswith("error: ollama_chat/llama3.1 was not found at ")
    assert (
        "(HTTP 404): 404 page not found; for ollama_chat, --api-base is the server's root" in line
    )
    assert "without /v1" in line and "e.g. http://localhost:11434" in line


def test_tool_call_arguments_as_a_string_are_refused_as_ollama_does(ollama_server):
    ollama_server.show_model("llama3.1", 8192)
    call = {"function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    body = {
        "model": "llama3.1",
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}],
    }
    status, answer = post(ollama_server, "/api/chat", body)
    assert status == 400 and "ToolCallFunction.arguments" in answer["error"]


def test_the_readme_example_needs_no_api_base_when_ollama_api_base_names_the_server(
    ollama_server, monkeypatch
):
    # `harness9 chat --model ollama_chat/llama3.1`, as the README has it, with the server
    # found where litellm finds it (OLLAMA_API_BASE, else localhost:11434).
    monkeypatch.setenv("OLLAMA_API_BASE", ollama_server.base_url)
    ollama_server.show_model("llama3.1", 32768)
    ollama_server.reply_text("hello from ollama")
    env = piped()
    result = cli("chat", "--model", "ollama_chat/llama3.1", "-p", "hi", obj=env)

    assert result.exit_code == 0, env.stderr.getvalue()
    assert env.stdout.getvalue() == "hello from ollama\n"
    assert ollama_server.show_requests == [{"model": "llama3.1"}]
    assert ollama_server.num_ctx_sent == [32768]


def test_an_ollama_stream_cut_off_keeps_what_was_shown(ollama_server):
    ollama_server.show_model("llama3.1", 8192)
    ollama_server.reply_stream_break("The answer is forty")
    result, out, err = ollama_chat(ollama_server, "-p", "question", model="ollama_chat/llama3.1")

    assert result.exit_code == 1
    assert out.startswith("The answer is forty")
    assert "broke off after 19 characters" in err
