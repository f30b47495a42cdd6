"""Constrained decoding: the JSON-schema grammar accepts exactly the texts the schema allows, refuses the
schema keywords it would not enforce (naming them), and the token picker only ever takes allowed tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi.models.server.grammar import accepts, feed, finished, matches, next_chars, start
from rsi.models.server.schema_grammar import SchemaUnsupported, any_object, schema_node, tool_call_node

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
    "colour": {"enum": ["red", "green"]}, "tags": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
    "note": {"type": ["string", "null"]}}, "required": ["name"]}


@pytest.mark.parametrize(("text", "ok"), [
    ('{"name": "Bob", "age": 3, "ok": true, "colour": "red", "tags": [1.5, -2e3], "note": null}', True),
    ('{"name":"B\\u00e9\\"","age":-0,"ok":false,"colour":"green","tags":[],"note":"x"}', True),
    ('{"name": "Bob", "age": 3.5, "ok": true, "colour": "red", "tags": [], "note": null}', False),  # not an integer
    ('{"name": "Bob", "age": 3, "ok": true, "colour": "blue", "tags": [], "note": null}', False),  # not in the enum
    ('{"name": "Bob", "age": 03, "ok": true, "colour": "red", "tags": [], "note": null}', False),  # leading zero
    ('{"name": "Bob", "age": 3, "ok": true, "colour": "red", "tags": [1, 2, 3], "note": null}', False),  # maxItems
    ('{"name": "Bobby Tables", "age": 3, "ok": true, "colour": "red", "tags": [], "note": null}', False),  # maxLength
    ('{"age": 3, "name": "Bob", "ok": true, "colour": "red", "tags": [], "note": null}', False),  # schema order
    ('{"name": "Bob"}', False),  # every property is written
    ('{"name": "a\nb", "age": 1, "ok": true, "colour": "red", "tags": [], "note": null}', False),  # raw control char
])
def test_a_schema_grammar_accepts_exactly_what_the_schema_allows(text: str, ok: bool) -> None:
    node = schema_node(PERSON, "response_format.json_schema.schema")
    assert matches(node, text) is ok
    if ok:
        json.loads(text)  # and what it accepts is JSON


def test_the_state_knows_what_may_come_next_and_when_it_is_finished() -> None:
    node = schema_node(PERSON, "s")
    st = feed(start(node), '{"name": "Bob", "age": 3')
    assert st is not None and next_chars(st) == set("0123456789,")  # more digits, or the next property
    assert feed(st, "x") is None
    done = feed(start(node), '{"name": "B", "age": 3, "ok": true, "colour": "red", "tags": [], "note": null}')
    assert done is not None and accepts(done) and finished(done)
    num = feed(start(schema_node({"type": "number"}, "s")), "42")
    assert num is not None and accepts(num) and not finished(num)  # a top-level number may go on


def test_json_object_and_a_forced_tool_call() -> None:
    obj = any_object()
    assert matches(obj, '{"a": {"b": [1, "x", null, {"c": true}]}, "d": -1.5}') and matches(obj, "{}")
    assert not matches(obj, "[1]") and not matches(obj, '{"a" :1}')
    call = tool_call_node([("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),
                           ("noop", None)], "tools")
    assert matches(call, '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    assert matches(call, '<tool_call>\n{"name": "noop", "arguments": {"any": [1]}}\n</tool_call>')
    assert not matches(call, '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    assert not matches(call, '<tool_call>{"name": "get_weather", "arguments": {"town": "Paris"}}</tool_call>')


def test_refs_anyof_and_maps() -> None:
    schema = {"$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}},
              "type": "object", "properties": {"p": {"$ref": "#/$defs/P"},
                                               "v": {"anyOf": [{"type": "integer"}, {"const": "none"}]},
                                               "m": {"type": "object", "additionalProperties": {"type": "boolean"}}}}
    node = schema_node(schema, "s")
    assert matches(node, '{"p": {"x": 1}, "v": "none", "m": {"a": true, "b": false}}')
    assert not matches(node, '{"p": {"x": 1}, "v": "some", "m": {}}')
    assert not matches(node, '{"p": {"x": 1}, "v": 2, "m": {"a": 1}}')


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "string", "pattern": "^a"}, "s: unsupported JSON-schema keyword(s) pattern"),
    ({"type": "integer", "minimum": 0}, "minimum"),
    ({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}, "s.properties.d: "),
    ({"oneOf": [{"type": "string"}]}, "oneOf"),
    ({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}}, "recursive"),
    ({"$ref": "https://example.com/x.json"}, "local"),
    ({"type": "array", "prefixItems": [{"type": "string"}]}, "prefixItems"),
    ({"type": "date"}, "unsupported type"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "s.required"),
])
def test_keywords_the_grammar_would_not_enforce_are_named(schema: dict[str, Any], words: str) -> None:
    with pytest.raises(SchemaUnsupported, match=None) as e:
        schema_node(schema, "s")
    assert words in str(e.value)


# -- the token picker ---------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


class _Tok:
    """A tokenizer of a handful of byte-level tokens (GPT-2 alphabet: 'Ġ' is a space)."""

    def __init__(self, tokens: list[str], special: list[int]) -> None:
        self.tokens = tokens
        self.all_special_ids = special

    def __len__(self) -> int:
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def batch_decode(self, seqs: list[list[int]], **_kw: Any) -> list[str]:
        return ["".join(self.tokens[i] for i in s).replace("Ġ", " ") for s in seqs]

    def get_added_vocab(self) -> dict[str, int]:
        return {}


TOKENS = ["<eos>", '{"', "name", '":', "Ġ", '"', "Bob", '"}', "}", "hello", "1", "2", ",", "Ġ\"", "x"]


def _constrained(node: Any) -> Any:
    from rsi.models.server.constrain import Constrained, Vocab

    return Constrained(node, Vocab(_Tok(TOKENS, [0]), eos_ids=[0]))


def test_the_picker_takes_the_most_likely_allowed_token_and_ends_with_the_grammar() -> None:
    node = schema_node({"type": "object", "properties": {"name": {"type": "string"}}}, "s")
    c = _constrained(node)
    logits = torch.zeros(len(TOKENS))
    logits[TOKENS.index("hello")] = 9.0  # the model's favourite is never allowed here
    logits[TOKENS.index("<eos>")] = 8.0
    taken: list[str] = []
    while not c.finished:
        tok = c.pick(logits, temperature=0.0, top_p=1.0, generator=None)
        if not taken:  # the object must open first, whatever the model likes best
            assert TOKENS[tok] == '{"'
        assert tok != 0  # never an end-of-sequence before the object closes
        c.advance(tok)
        taken.append(TOKENS[tok])
        logits[tok] -= 4.0  # let the next allowed token win the next step
        assert len(taken) < 20
    text = "".join(taken).replace("Ġ", " ")
    assert matches(node, text) and json.loads(text).keys() == {"name"}


def test_sampled_picks_are_allowed_and_follow_the_masked_distribution() -> None:
    node = schema_node({"type": "integer"}, "s")  # digits, then the end-of-sequence token
    gen = torch.Generator().manual_seed(0)
    logits = torch.zeros(len(TOKENS))
    logits[TOKENS.index("1")] = 1.0  # p(1) / p(2) = e among the allowed first tokens
    first = [_constrained(node).pick(logits, temperature=1.0, top_p=1.0, generator=gen) for _ in range(3000)]
    assert set(first) <= {TOKENS.index("1"), TOKENS.index("2")}
    share = first.count(TOKENS.index("1")) / len(first)
    assert abs(share - 2.718281828 / 3.718281828) < 0.03
    nucleus = [_constrained(node).pick(logits, temperature=1.0, top_p=0.5, generator=gen) for _ in range(50)]
    assert set(nucleus) == {TOKENS.index("1")}  # top-p over the allowed tokens keeps only the likelier one
