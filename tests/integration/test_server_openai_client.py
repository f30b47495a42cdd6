"""The real embedded server (SmolLM2-135M on the CPU) driven by the official `openai` Python client, as an
external harness drives it: every field is honoured as vLLM honours it, or refused with 400 naming it.

One server for the module (the same start as test_model_server: a subprocess from an unrelated cwd)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from rsi.models.embedded import DEFAULT_MODEL_ID
from tests.integration.test_model_server import server  # noqa: F401 - the module's server fixture

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

M = DEFAULT_MODEL_ID
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def oai(server: str) -> Iterator[Any]:  # noqa: F811 - the imported fixture
    client = openai.OpenAI(base_url=server, api_key="unused", timeout=300, max_retries=0)
    yield client
    client.close()


def _refused(call: Any, *words: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        call()
    assert e.value.status_code == 400
    msg = str(e.value)
    assert all(w in msg for w in words), msg


def _checked_call(tc: Any, names: set[str]) -> dict[str, Any]:
    """A tool call of one of `names` whose arguments are valid for that tool's schema."""
    assert tc.type == "function" and tc.function.name in names and tc.id
    args = json.loads(tc.function.arguments)
    jsonschema.validate(args, SCHEMAS[tc.function.name])
    return dict(args)


# -- plain chat, streaming with usage -------------------------------------------------------------------------

def test_chat_and_a_stream_with_usage(oai: Any) -> None:
    r = oai.chat.completions.create(model=M, messages=ASK, max_tokens=12, temperature=0)
    assert r.choices[0].message.content and r.usage.completion_tokens <= 12
    chunks = list(oai.chat.completions.create(model=M, messages=ASK, max_tokens=12, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens


# -- tool_choice ---------------------------------------------------------------------------------------------

def test_tool_choice_required_always_answers_with_a_valid_call(oai: Any) -> None:
    """The issue's report: `required` came back as plain text (finish_reason length). Now decoding is
    constrained to a call; with auto the same model answers in prose."""
    auto = oai.chat.completions.create(model=M, messages=ASK, tools=TOOLS, max_tokens=24, temperature=0)
    assert not auto.choices[0].message.tool_calls  # the small model does not call on its own here
    for temperature in (0.0, 1.0):
        r = oai.chat.completions.create(model=M, messages=ASK, tools=TOOLS, tool_choice="required",
                                        max_tokens=64, temperature=temperature, seed=5)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.tool_calls, ch
        _checked_call(ch.message.tool_calls[0], {"get_weather", "add"})


def test_a_named_tool_choice_calls_that_function(oai: Any) -> None:
    r = oai.chat.completions.create(model=M, messages=ASK, tools=TOOLS, max_tokens=64, temperature=0,
                                    tool_choice={"type": "function", "function": {"name": "add"}})
    calls = r.choices[0].message.tool_calls
    assert calls and len(calls) == 1
    assert set(_checked_call(calls[0], {"add"})) == {"a", "b"}


def test_a_forced_call_streams_too(oai: Any) -> None:
    chunks = list(oai.chat.completions.create(model=M, messages=ASK, tools=TOOLS, tool_choice="required",
                                              max_tokens=64, temperature=0, stream=True))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name in SCHEMAS
    jsonschema.validate(json.loads(deltas[0].function.arguments), SCHEMAS[deltas[0].function.name])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_tool_choice_none_never_calls(oai: Any) -> None:
    r = oai.chat.completions.create(model=M, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=24,
                                    temperature=0)
    assert not r.choices[0].message.tool_calls and r.choices[0].message.content


def test_a_tool_choice_naming_no_offered_tool_is_a_400(oai: Any) -> None:
    _refused(lambda: oai.chat.completions.create(
        model=M, messages=ASK, tools=TOOLS, max_tokens=8,
        tool_choice={"type": "function", "function": {"name": "launch_rockets"}}), "tool_choice", "launch_rockets")
    _refused(lambda: oai.chat.completions.create(model=M, messages=ASK, tool_choice="required", max_tokens=8),
             "tool_choice")


# -- response_format -----------------------------------------------------------------------------------------

def test_response_format_json_schema_gives_valid_json(oai: Any) -> None:
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 30}, "legs": {"type": "integer"}, "weight_kg": {"type": "number"},
        "indoor": {"type": "boolean"}, "colour": {"enum": ["black", "white", "ginger"]}},
        "required": ["name", "legs", "weight_kg", "indoor", "colour"], "additionalProperties": False}
    r = oai.chat.completions.create(
        model=M, messages=[{"role": "user", "content": "Describe a cat."}], max_tokens=96, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "cat", "schema": schema, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_response_format_json_object_gives_an_object(oai: Any) -> None:
    r = oai.chat.completions.create(model=M, messages=[{"role": "user", "content": "A colour as JSON."}],
                                    max_tokens=48, temperature=0, response_format={"type": "json_object"})
    content = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:  # cut at max_tokens: still the start of an object
        assert r.choices[0].finish_reason == "length" and content.startswith("{")


def test_a_schema_the_grammar_cannot_enforce_is_a_400_naming_the_keyword(oai: Any) -> None:
    schema = {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
    _refused(lambda: oai.chat.completions.create(
        model=M, messages=ASK, max_tokens=8,
        response_format={"type": "json_schema", "json_schema": {"name": "z", "schema": schema}}),
        "response_format.json_schema.schema.properties.zip", "pattern")


# -- n, logprobs, stop, seed ------------------------------------------------------------------------------------

def test_n_choices(oai: Any) -> None:
    r = oai.chat.completions.create(model=M, messages=ASK, max_tokens=10, temperature=1.0, n=3, seed=11)
    assert [c.index for c in r.choices] == [0, 1, 2] and all(c.message.content for c in r.choices)
    assert len({c.message.content for c in r.choices}) > 1  # each choice samples with its own seed
    assert 3 <= r.usage.completion_tokens <= 30  # every choice's tokens, the prompt's once
    _refused(lambda: oai.chat.completions.create(model=M, messages=ASK, max_tokens=4, n=17), "n")


def test_logprobs_with_the_top_alternatives(oai: Any) -> None:
    r = oai.chat.completions.create(model=M, messages=ASK, max_tokens=6, temperature=0, logprobs=True,
                                    top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens and "".join(c.token for c in content).startswith(
        r.choices[0].message.content[:3])
    for c in content:
        assert len(c.top_logprobs) == 3
        lps = [t.logprob for t in c.top_logprobs]
        assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
        assert c.top_logprobs[0].token == c.token and c.top_logprobs[0].logprob == pytest.approx(c.logprob)
        assert bytes(c.bytes).decode() == c.token
    _refused(lambda: oai.chat.completions.create(model=M, messages=ASK, max_tokens=4, top_logprobs=2),
             "top_logprobs")


def test_stop_string_or_list_also_in_a_stream(oai: Any) -> None:
    full = oai.chat.completions.create(model=M, messages=ASK, max_tokens=24, temperature=0).choices[0].message.content
    word = full.split()[2]
    for stop in (word, [word, "zzzz"]):
        r = oai.chat.completions.create(model=M, messages=ASK, max_tokens=24, temperature=0, stop=stop)
        cut = r.choices[0].message.content
        assert word not in cut and full.startswith(cut) and r.choices[0].finish_reason == "stop"
        streamed = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(
            model=M, messages=ASK, max_tokens=24, temperature=0, stop=stop, stream=True) if c.choices)
        assert streamed == cut


def test_seed_reproduces_a_sampled_answer(oai: Any) -> None:
    def answer(seed: int) -> str:
        r = oai.chat.completions.create(model=M, messages=ASK, max_tokens=16, temperature=1.0, seed=seed)
        return str(r.choices[0].message.content)

    a = answer(42)
    assert answer(42) == a
    assert any(answer(s) != a for s in (1, 2, 3))  # and the seed matters


# -- fields it does not serve ---------------------------------------------------------------------------------

def test_a_field_that_would_change_the_answer_is_a_400_naming_it(oai: Any) -> None:
    _refused(lambda: oai.chat.completions.create(model=M, messages=ASK, max_tokens=4, frequency_penalty=0.5),
             "frequency_penalty")
    _refused(lambda: oai.chat.completions.create(model=M, messages=ASK, max_tokens=4, extra_body={"top_k": 5}),
             "top_k")
    _refused(lambda: oai.chat.completions.create(model=M, messages=ASK, max_tokens=4,
                                                 extra_body={"guided_choice": ["a", "b"]}), "guided_choice")
    ok = oai.chat.completions.create(model=M, messages=ASK, max_tokens=4, user="harness-1", presence_penalty=0,
                                     metadata={"run": "x"})
    assert ok.choices[0].message.content


# -- /v1/completions -----------------------------------------------------------------------------------------

def test_text_completions(oai: Any) -> None:
    r = oai.completions.create(model=M, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text and r.usage.completion_tokens <= 6
    ids = oai.completions.create(model=M, prompt=[504, 3575, 282, 4649, 314], max_tokens=6, temperature=0)
    assert ids.choices[0].text and ids.usage.prompt_tokens == 5
    batch = oai.completions.create(model=M, prompt=["One, two,", "Red, green,"], max_tokens=4, temperature=0,
                                   n=2, stop=["\n"])
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.choices[0].text == batch.choices[1].text  # greedy: n copies
    assert all("\n" not in c.text for c in batch.choices)


def test_text_completion_logprobs_echo_and_stream(oai: Any) -> None:
    prompt = "The capital of France is"
    r = oai.completions.create(model=M, prompt=prompt, max_tokens=4, temperature=0, logprobs=2, echo=True)
    ch = r.choices[0]
    assert ch.text.startswith(prompt)
    lp = ch.logprobs
    n = r.usage.prompt_tokens + r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert lp.token_logprobs[0] is None and all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert "".join(lp.tokens) == ch.text and lp.text_offset[1] == len(lp.tokens[0])
    assert all(2 <= len(t) <= 3 for t in lp.top_logprobs[1:])  # the top 2, plus the chosen one
    plain = oai.completions.create(model=M, prompt=prompt, max_tokens=4, temperature=0)
    assert ch.text == prompt + plain.choices[0].text
    streamed = "".join(c.choices[0].text for c in oai.completions.create(
        model=M, prompt=prompt, max_tokens=4, temperature=0, stream=True) if c.choices)
    assert streamed == plain.choices[0].text


def test_a_completions_field_it_does_not_serve_is_a_400(oai: Any) -> None:
    _refused(lambda: oai.completions.create(model=M, prompt="x", max_tokens=4, suffix="end"), "suffix")
    _refused(lambda: oai.completions.create(model=M, prompt="x", max_tokens=4, best_of=3), "best_of")
    _refused(lambda: oai.completions.create(model=M, prompt="x", max_tokens=4, logit_bias={"5": 10}), "logit_bias")
