from harness9.schema import Message, ToolCall


def test_assistant_with_tool_calls_round_trips_through_openai_dict():
    msg = Message("assistant", "", [ToolCall("c1", "read_file", '{"path":"a.py"}')])
    data = msg.to_dict()
    assert data == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
            }
        ],
    }
    assert Message.from_dict(data) == msg


def test_tool_result_carries_its_call_id():
    assert Message("tool", "out", tool_call_id="c1").to_dict() == {
        "role": "tool",
        "content": "out",
        "tool_call_id": "c1",
    }
