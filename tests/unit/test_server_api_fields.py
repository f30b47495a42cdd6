"""Every field a harness may send is honoured or refused with 400 naming it (against a fake engine):
tool_choice, response_format, n, logprobs / top_logprobs, stop, seed, unknown fields, /v1/completions."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("torch")

from fastapi.testclient import TestClient  # noqa: E402

from rsi.models.server.app import create_app  # noqa: E402
from rsi.models.server.decode import GenRequest, GenResult, TokenLogprob  # noqa: E402
from rsi.models.server.grammar import matches  # noqa: E402
from rsi.models.server.jobs import EngineError, Job  # noqa: E402

MODEL = "fake-model"
MSGS = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
ECHO = [TokenLogprob("P", [80], None), TokenLogprob("Q", [81], -2.0, [("Q", [81], -2.0)])]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


class FakeEngine:
    """Answers request k with `texts[k % len]` (a tool call when it parses as one), as the worker would."""

    model_id = MODEL

    def __init__(self, texts: list[str] | None = None) -> None:
        self.texts = texts or ["hello"]
        self.requests: list[GenRequest] = []

    def model_ids(self) -> list[str]:
        return [MODEL]

    def info(self) -> dict[str, Any]:
        return {}

    def prompt_ids(self, req: GenRequest) -> list[int]:
        return [1, 2, 3]

    def prompt_text(self, req: GenRequest) -> str:
        return req.prompt if isinstance(req.prompt, str) else "<ids>"

    def submit(self, req: GenRequest, on_delta: Any = None) -> Job:
        if req.model != MODEL:
            raise EngineError(f"The model `{req.model}` does not exist.", status=404)
        k = len(self.requests)
        self.requests.append(req)
        text = self.texts[k % len(self.texts)]
        job = Job(req, on_delta)
        calls = []
        if req.parses_tools and text.startswith("<tool_call>"):
            calls = [{"id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
        entries = [TokenLogprob(t, list(t.encode()), -0.5, [(t, list(t.encode()), -0.5), ("x", [120], -1.5)]
                                [: 1 + min(req.top_logprobs, 1)]) for t in (text[:2], text[2:])]

        def work() -> None:
            if on_delta and not req.parses_tools:  # as the engine: a reply that may hold a call comes whole
                on_delta(text)
            job._resolve(GenResult(
                text=None if calls else text, tool_calls=calls, finish_reason="tool_calls" if calls else "stop",
                prompt_tokens=3, completion_tokens=2, cached_tokens=1,
                logprobs=[-0.5, -0.5] if req.logprobs else None,
                logprob_content=entries if req.logprobs else None,
                prompt_text=self.prompt_text(req) if req.prompt is not None else None,
                prompt_logprob_content=ECHO if req.prompt_logprobs is not None else None))

        threading.Thread(target=work).start()
        return job


def _post(body: dict[str, Any], texts: list[str] | None = None,
          route: str = "chat/completions") -> tuple[Any, FakeEngine]:
    eng = FakeEngine(texts)
    base = {"model": MODEL, "messages": MSGS} if route == "chat/completions" else {"model": MODEL}
    r = TestClient(create_app(eng)).post(f"/v1/{route}", json={**base, **body})  # type: ignore[arg-type]
    return r, eng


def _refused(r: Any, eng: FakeEngine, *words: str) -> None:
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert all(w in msg for w in words), msg
    assert not eng.requests  # refused before it reached the engine


# -- tool_choice ---------------------------------------------------------------------------------------------

def test_tool_choice_required_constrains_decoding_to_a_call_of_an_offered_tool() -> None:
    r, eng = _post({"tools": TOOLS, "tool_choice": "required"}, [CALL])
    assert r.status_code == 200, r.text
    req = eng.requests[0]
    assert req.tool_choice == "required" and req.grammar is not None
    assert matches(req.grammar, CALL)
    assert matches(req.grammar, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
    assert not matches(req.grammar, "Paris is sunny.")
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_named_tool_choice_allows_that_tool_only() -> None:
    r, eng = _post({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "add"}}}, [CALL])
    assert r.status_code == 200, r.text
    g = eng.requests[0].grammar
    assert g is not None and not matches(g, CALL)
    assert matches(g, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')


@pytest.mark.parametrize(("body", "words"), [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, ("tool_choice", "nope")),
    ({"tool_choice": "required"}, ("tool_choice", "needs tools")),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, ("tool_choice",)),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}], "tool_choice": "required"},
     ("tool_choice", "tools[0].function.parameters.properties.d", "format")),
])
def test_a_tool_choice_it_cannot_honour_is_a_400_naming_it(body: dict[str, Any], words: tuple[str, ...]) -> None:
    _refused(*_post(body), *words)


def test_tool_choice_none_parses_no_call_and_auto_does() -> None:
    r, eng = _post({"tools": TOOLS, "tool_choice": "none"}, [CALL])
    assert eng.requests[0].tool_choice == "none" and not eng.requests[0].parses_tools
    assert r.json()["choices"][0]["message"] == {"role": "assistant", "content": CALL}
    r, eng = _post({"tools": TOOLS}, [CALL])
    assert eng.requests[0].parses_tools and eng.requests[0].grammar is None
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"


# -- response_format -----------------------------------------------------------------------------------------

def test_response_format_json_schema_and_json_object_constrain_decoding() -> None:
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green"]}, "n": {"type": "number"}}}
    r, eng = _post({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 200, r.text
    g = eng.requests[0].grammar
    assert g is not None and matches(g, '{"colour": "red", "n": 1.5}') and not matches(g, '{"colour": "blue", "n": 1}')
    r, eng = _post({"response_format": {"type": "json_object"}})
    g = eng.requests[0].grammar
    assert g is not None and matches(g, '{"a": [1, {"b": null}]}') and not matches(g, "hello")
    r, eng = _post({"response_format": {"type": "text"}})
    assert r.status_code == 200 and eng.requests[0].grammar is None


@pytest.mark.parametrize(("rf", "words"), [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^a"}}},
     ("response_format.json_schema.schema", "pattern")),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, ("response_format.json_schema",)),
    ({"type": "xml"}, ("response_format", "xml")),
])
def test_a_response_format_it_cannot_honour_is_a_400_naming_it(rf: dict[str, Any], words: tuple[str, ...]) -> None:
    _refused(*_post({"response_format": rf}), *words)


def test_one_constraint_per_request() -> None:
    _refused(*_post({"response_format": {"type": "json_object"}, "tools": TOOLS}), "response_format", "tool_choice")
    r, eng = _post({"response_format": {"type": "json_object"}, "tools": TOOLS, "tool_choice": "none"})
    assert r.status_code == 200 and eng.requests[0].grammar is not None


# -- n, seed, stop, logprobs ------------------------------------------------------------------------------------

def test_n_choices_each_with_its_own_seed_and_usage_for_all() -> None:
    r, eng = _post({"n": 3, "seed": 7, "temperature": 0.9, "stop": ["\n"]}, ["a", "b", "c"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in body["choices"]] == ["a", "b", "c"]
    assert [q.seed for q in eng.requests] == [7, 8, 9] and all(q.stop == ["\n"] for q in eng.requests)
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 6
    _refused(*_post({"n": 17}), "n")


def test_logprobs_carry_the_top_alternatives() -> None:
    r, _ = _post({"logprobs": True, "top_logprobs": 2}, ["hello"])
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == ["he", "llo"]
    assert content[0]["top_logprobs"] == [{"token": "he", "logprob": -0.5, "bytes": [104, 101]},
                                          {"token": "x", "logprob": -1.5, "bytes": [120]}]
    _refused(*_post({"top_logprobs": 2}), "top_logprobs", "logprobs")
    _refused(*_post({"logprobs": True, "top_logprobs": 21}), "top_logprobs")


# -- fields it does not serve ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "word"), [
    ({"frequency_penalty": 0.5}, "frequency_penalty"), ({"presence_penalty": 1}, "presence_penalty"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"), ({"top_k": 5}, "top_k"), ({"best_of": 3}, "best_of"),
    ({"reasoning_effort": "high"}, "reasoning_effort"), ({"frobnicate": True}, "frobnicate"),
    ({"guided_choice": ["a"]}, "guided_choice"), ({"ignore_eos": True}, "ignore_eos"),
])
def test_a_field_that_would_change_the_answer_is_a_400_naming_it(extra: dict[str, Any], word: str) -> None:
    _refused(*_post(extra), word)


def test_benign_fields_and_defaults_spelled_out_are_accepted() -> None:
    r, eng = _post({"user": "u1", "metadata": {"run": "x"}, "store": False, "frequency_penalty": 0,
                    "presence_penalty": 0.0, "logit_bias": {}, "top_k": -1, "parallel_tool_calls": True,
                    "service_tier": "auto", "guided_json": None})
    assert r.status_code == 200, r.text
    assert len(eng.requests) == 1


# -- streaming -------------------------------------------------------------------------------------------------

def _events(body: dict[str, Any], texts: list[str], route: str = "chat/completions") -> list[dict[str, Any]]:
    eng = FakeEngine(texts)
    base = {"model": MODEL, "messages": MSGS} if route == "chat/completions" else {"model": MODEL}
    with TestClient(create_app(eng)).stream("POST", f"/v1/{route}",  # type: ignore[arg-type]
                                            json={**base, **body, "stream": True}) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln[len("data: "):]) for ln in lines[:-1]]


def test_a_stream_of_n_choices_and_a_forced_call_in_a_stream() -> None:
    chunks = _events({"n": 2, "stream_options": {"include_usage": True}}, ["ab", "cd"])
    text = {0: "", 1: ""}
    for ch in chunks:
        for c in ch["choices"]:
            text[c["index"]] += c["delta"].get("content") or ""
    assert text == {0: "ab", 1: "cd"}
    assert sorted(c["index"] for ch in chunks for c in ch["choices"] if c["finish_reason"]) == [0, 1]
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    chunks = _events({"tools": TOOLS, "tool_choice": "required"}, [CALL])
    calls = [c["delta"]["tool_calls"] for ch in chunks for c in ch["choices"] if c["delta"].get("tool_calls")]
    assert calls and calls[0][0]["function"]["name"] == "get_weather"
    chunks = _events({"tools": TOOLS}, ["no call here"])  # tools offered, a plain answer: its text still comes
    assert "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"]) == "no call here"


# -- /v1/completions -----------------------------------------------------------------------------------------

def test_text_completions_for_a_batch_of_prompts_and_n() -> None:
    r, eng = _post({"prompt": ["one", "two"], "n": 2, "max_tokens": 4, "stop": "\n", "seed": 1}, ["x", "y"],
                   route="completions")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion"
    assert [(c["index"], c["text"]) for c in body["choices"]] == [(0, "x"), (1, "y"), (2, "x"), (3, "y")]
    assert [q.prompt for q in eng.requests] == ["one", "one", "two", "two"]
    assert [q.seed for q in eng.requests] == [1, 2, 1, 2] and eng.requests[0].max_tokens == 4
    assert eng.requests[0].stop == ["\n"] and eng.requests[0].messages == []
    assert body["usage"]["prompt_tokens"] == 6 and body["usage"]["completion_tokens"] == 8
    r, eng = _post({"prompt": "p"}, route="completions")
    assert eng.requests[0].max_tokens == 16  # OpenAI's and vLLM's default
    for ids, want in (([5, 6], [[5, 6]]), ([[5, 6], [7]], [[5, 6], [7]])):  # token ids: one prompt, or a batch
        r, eng = _post({"prompt": ids}, route="completions")
        assert r.status_code == 200 and [q.prompt for q in eng.requests] == want


def test_text_completion_logprobs_and_echo_in_the_legacy_shape() -> None:
    r, eng = _post({"prompt": "PQ", "logprobs": 1, "echo": True}, ["hello"], route="completions")
    assert r.status_code == 200, r.text
    assert eng.requests[0].prompt_logprobs == 1 and eng.requests[0].top_logprobs == 1
    ch = r.json()["choices"][0]
    assert ch["text"] == "PQhello"
    lp = ch["logprobs"]
    assert lp["tokens"] == ["P", "Q", "he", "llo"] and lp["token_logprobs"] == [None, -2.0, -0.5, -0.5]
    assert lp["top_logprobs"][0] is None and lp["top_logprobs"][2] == {"he": -0.5, "x": -1.5}
    assert lp["text_offset"] == [0, 1, 2, 4]


@pytest.mark.parametrize(("extra", "words"), [
    ({"suffix": "end"}, ("suffix",)), ({"best_of": 3}, ("best_of",)), ({"logprobs": 21}, ("logprobs",)),
    ({"presence_penalty": 0.3}, ("presence_penalty",)), ({"prompt": []}, ("prompt",)),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "maximum": 3}}}},
     ("maximum",)),
])
def test_a_completions_field_it_cannot_honour_is_a_400_naming_it(extra: dict[str, Any], words: tuple[str, ...]) -> None:
    _refused(*_post({"prompt": "p", **extra}, route="completions"), *words)


def test_a_text_completion_stream_with_echo_and_usage() -> None:
    chunks = _events({"prompt": "Say:", "echo": True, "stream_options": {"include_usage": True}}, ["hi"],
                     route="completions")
    assert all(ch["object"] == "text_completion" for ch in chunks)
    assert "".join(c["text"] for ch in chunks for c in ch["choices"]) == "Say:hi"
    assert [c["finish_reason"] for ch in chunks for c in ch["choices"] if c["finish_reason"]] == ["stop"]
    assert chunks[-1]["usage"]["total_tokens"] == 5


def test_models_lists_a_lora_with_its_directory_as_root_as_vllm_does(tmp_path: Path) -> None:
    """The recording gateway hashes the weights the endpoint names as a LoRA's `root` (the served adapter's digest,
    compared with the manifest); a server listing the base model there would leave only the serve name to check."""
    eng = FakeEngine()
    eng.adapters = {"agent-g0001-abcd1234": str(tmp_path / "adapters" / "g0001")}  # type: ignore[attr-defined]
    eng.model_ids = lambda: [MODEL, "agent-g0001-abcd1234"]  # type: ignore[method-assign]
    with TestClient(create_app(eng)) as c:  # type: ignore[arg-type]
        data = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    assert data[MODEL]["root"] == MODEL and data[MODEL]["parent"] is None
    lora = data["agent-g0001-abcd1234"]
    assert lora["root"] == str((tmp_path / "adapters" / "g0001").resolve()) and lora["parent"] == MODEL
