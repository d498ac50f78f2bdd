from harness9.schema import Message, ToolCall, ToolDefinition
from harness9.tokens import estimate_tokens, estimate_tool_tokens, format_token_count


def test_estimate_counts_utf8_bytes_divided_by_four():
    assert estimate_tokens([Message("user", "a" * 400)]) == 100


def test_cjk_text_counts_three_bytes_per_character():
    # 100 CJK characters are 300 UTF-8 bytes: 75 tokens, not the 25 that chars/4 would give.
    assert estimate_tokens([Message("user", "字" * 100)]) == 75


def test_estimate_includes_tool_call_fields_and_rounds_once():
    msg = Message("assistant", "", [ToolCall("call_1", "bash", '{"command":"ls"}')])
    result = Message("tool", "ok", tool_call_id="call_1")
    # 6 + 4 + 16 bytes for the call, 2 + 6 for the result: 34 bytes -> 8 tokens.
    assert estimate_tokens([msg, result]) == 34 // 4


def test_tool_tokens_use_compact_json_schema():
    tool = ToolDefinition("bash", "Run", {"type": "object", "properties": {}})
    schema_bytes = len('{"type":"object","properties":{}}')
    assert estimate_tool_tokens([tool]) == (4 + 3 + schema_bytes) // 4


def test_format_token_count_examples_from_the_design():
    assert format_token_count(500) == "500"
    assert format_token_count(45200) == "45.2K"
    assert format_token_count(1_200_000) == "1.2M"
    assert format_token_count(128_000) == "128K"
    assert format_token_count(999_999) == "1M"
