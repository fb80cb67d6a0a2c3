"""Guards the lenient tool-call reader: the call formats the base checkpoint writes, and what it refuses."""

import pytest

from sqlenv.env.tool_calls import lenient_tool_calls


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    "text, expected",
    [
        ('```json\n{\n  "name": "query",\n  "arguments": {\n    "sql": "SELECT 1"\n  }\n}\n```',
         [call("query", {"sql": "SELECT 1"})]),  # a fenced block, as the base model writes most calls
        ('{"name": "describe", "arguments": {"table_name": "flight"}}', [call("describe", {"table_name": "flight"})]),
        ('<tool_call>\n{"name": "answer", "arguments": {"value": "7"}}\n</tool_call>', [call("answer", {"value": "7"})]),
        ('First {"name": "describe", "arguments": {"table_name": "a"}} then {"name": "sample", "arguments": '
         '{"table_name": "b"}}.', [call("describe", {"table_name": "a"}), call("sample", {"table_name": "b"})]),
        ('{"name": "query", "arguments": "{\\"sql\\": \\"SELECT 2\\"}"}', [call("query", {"sql": "SELECT 2"})]),
        ('{"tool_call": {"name": "answer", "arguments": {"value": "x"}}}', [call("answer", {"value": "x"})]),
        ('{"name": "flight_numbers", "arguments": {"table_name": "flight"}}',  # unknown tool: still a call,
         [call("flight_numbers", {"table_name": "flight"})]),                 # the loop reports the error
        ('{"name": "query", "arguments": {"sql": "SELECT {x}"}}', [call("query", {"sql": "SELECT {x}"})]),
        ('{"name": "query", "arguments": {"sql": "SELECT 1",}}', []),  # trailing comma: not JSON
        ("{'name': 'query', 'arguments': {'sql': 'SELECT 1'}}", []),  # single quotes: not JSON
        ('{"tool": "query", "args": {"sql": "SELECT 1"}}', []),  # other key names
        ('{"name": "query"}', []),  # no arguments
        ("I would query the flight table.", []),
        ("", []),
    ],
)
def test_lenient_reading(text, expected):
    assert lenient_tool_calls(text) == expected
