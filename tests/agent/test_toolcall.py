"""Tool-call parsing: the tagged form, plain JSON, and malformed replies as counted errors."""
from src.agent.toolcall import parse_tool_calls


def test_tagged_calls_with_surrounding_reasoning():
    text = ('I will write the kernel.\n<tool_call>\n{"name": "write_file", "arguments": {"path": "model_new.py", '
            '"content": "x = 1\\n"}}\n</tool_call>\nthen compile\n<tool_call>{"name": "compile"}</tool_call>')
    parsed = parse_tool_calls(text)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("write_file", {"path": "model_new.py", "content": "x = 1\n"}), ("compile", {})]


def test_plain_json_openai_nesting_and_string_arguments():
    assert parse_tool_calls('{"name": "verify", "arguments": {}}').calls[0].name == "verify"
    fenced = 'Here:\n```json\n{"function": {"name": "read_file", "arguments": "{\\"path\\": \\"model.py\\"}"}}\n```'
    call = parse_tool_calls(fenced).calls[0]
    assert (call.name, call.arguments) == ("read_file", {"path": "model.py"})
    both = parse_tool_calls('[{"name": "compile"}, {"name": "finish", "parameters": {}}]')
    assert [c.name for c in both.calls] == ["compile", "finish"]


def test_malformed_calls_become_errors_not_exceptions():
    cases = {
        '<tool_call>{"name": "compile"</tool_call>': "not valid JSON",
        '<tool_call>{"name": "compile"}': "not closed",
        '<tool_call>{"arguments": {}}</tool_call>': "string 'name'",
        '<tool_call>{"name": "x", "arguments": [1]}</tool_call>': "must be a JSON object",
        '<tool_call>{"name": "x"} trailing</tool_call>': "unexpected text",
        '<tool_call>"compile"</tool_call>': "JSON object",
    }
    for text, message in cases.items():
        parsed = parse_tool_calls(text)
        assert parsed.calls == [] and len(parsed.errors) == 1 and message in parsed.errors[0], text


def test_prose_without_a_call_is_no_call():
    parsed = parse_tool_calls("Let me think about the {tiling} first.")
    assert parsed.calls == [] and parsed.errors == []
