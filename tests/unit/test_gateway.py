"""The recording gateway (rsi.models.gateway) over real loopback HTTP, with a fake endpoint behind it."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rsi.models.client import ChatClient, ModelRequestError
from rsi.models.gateway import Gateway, SessionPolicy, read_calls, sha8_of_serve_name

SHA = hashlib.sha256(b"weights").hexdigest()
SERVE = f"default-g1-{SHA[:8]}"


def fake_endpoint(seen: list[dict[str, Any]], root: str | None = None) -> httpx.MockTransport:
    """An embedded-server lookalike: echoes the model, returns token ids and logprobs when asked."""

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": SERVE, "root": root or "base"}]})
        body = json.loads(req.content)
        seen.append(body)
        n = min(3, body.get("max_tokens") or 3)
        data: dict[str, Any] = {
            "id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop",
                         "logprobs": {"content": [{"token": "o", "logprob": -0.5}] * n} if body.get("logprobs")
                         else None}],
            "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
        }
        if body.get("return_token_ids"):
            data["prompt_token_ids"] = [1, 2, 3, 4, 5]
            data["choices"][0]["token_ids"] = list(range(10, 10 + n))
        return httpx.Response(200, json=data)

    return httpx.MockTransport(handler)


@pytest.fixture
def seen() -> list[dict[str, Any]]:
    return []


def _gw(seen: list[dict[str, Any]], root: str | None = None) -> Gateway:
    return Gateway(transport=fake_endpoint(seen, root))


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json=body, timeout=10)


MSG = [{"role": "user", "content": "hi"}]


def test_records_served_tokens_and_hides_them_from_the_harness(seen: list[dict[str, Any]], tmp_path: Path) -> None:
    with _gw(seen) as gw, gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=8,
                                                                        adapter_sha256=SHA)) as s:
        r = _post(s.base_url, {"model": SERVE, "messages": MSG, "max_tokens": 3, "temperature": 0.7})
        assert r.status_code == 200
        got = r.json()
        assert "prompt_token_ids" not in got and "token_ids" not in got["choices"][0]
        assert got["choices"][0]["logprobs"] is None  # the harness did not ask for them
        assert seen[0]["return_token_ids"] is True and seen[0]["logprobs"] is True
        (c,) = s.calls
        assert c.prompt_token_ids == [1, 2, 3, 4, 5] and c.completion_token_ids == [10, 11, 12]
        assert c.logprobs == [-0.5] * 3 and c.request["temperature"] == 0.7
        assert c.served_model == SERVE and c.adapter_sha256 == SHA and c.adapter_check == "serve-name"
        assert s.usage.prompt_tokens == 5 and s.usage.completion_tokens == 3 and s.usage.calls == 1
        assert read_calls(s.write(tmp_path / "gateway.jsonl")) == s.calls


def test_a_harness_that_asks_for_token_ids_gets_them(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw, gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=8)) as s:
        got = _post(s.base_url, {"model": SERVE, "messages": MSG, "return_token_ids": True, "logprobs": True}).json()
        assert got["prompt_token_ids"] == [1, 2, 3, 4, 5] and got["choices"][0]["logprobs"]["content"]


def test_another_model_is_refused_and_never_forwarded(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw, gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=8)) as s:
        r = _post(s.base_url, {"model": "SmolLM2-135M-Instruct", "messages": MSG})
        assert r.status_code == 403 and "pinned" in r.json()["error"]["message"]
        assert seen == [] and s.calls[0].refused and s.calls[0].status == 403
        with ChatClient(s.base_url, max_attempts=1) as client, pytest.raises(ModelRequestError):
            client.chat("other-adapter", MSG)


def test_max_tokens_is_clamped_to_the_ceiling_and_set_when_missing(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw, gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=2)) as s:
        assert _post(s.base_url, {"model": SERVE, "messages": MSG, "max_tokens": 4000}).status_code == 200
        assert _post(s.base_url, {"model": SERVE, "messages": MSG}).status_code == 200
        assert _post(s.base_url, {"model": SERVE, "messages": MSG, "max_completion_tokens": 99}).status_code == 200
        assert [b["max_tokens"] for b in seen] == [2, 2, 2]
        assert seen[2]["max_completion_tokens"] == 2
        assert s.calls[0].clamped == {"max_tokens": [4000, 2]} and s.calls[1].clamped == {"max_tokens": [None, 2]}
        assert all(len(c.completion_token_ids or []) <= 2 for c in s.calls)


def test_turns_deadline_and_token_budget_are_enforced(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw:
        with gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=3, max_calls=2)) as s:
            codes = [_post(s.base_url, {"model": SERVE, "messages": MSG}).status_code for _ in range(3)]
            assert codes == [200, 200, 403] and len(seen) == 2
        with gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=3,
                                                           deadline=time.monotonic() - 1)) as s:
            r = _post(s.base_url, {"model": SERVE, "messages": MSG})
            assert r.status_code == 403 and "time limit" in r.json()["error"]["message"]
        with gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=3, token_budget=10)) as s:
            codes = [_post(s.base_url, {"model": SERVE, "messages": MSG}).status_code for _ in range(3)]
            assert codes == [200, 200, 403]  # 8 tokens, 16 tokens: the third call is past the budget


def test_stream_and_n_are_refused(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw, gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=3)) as s:
        assert _post(s.base_url, {"model": SERVE, "messages": MSG, "stream": True}).status_code == 400
        assert _post(s.base_url, {"model": SERVE, "messages": MSG, "n": 2}).status_code == 400
        assert seen == []


def test_unknown_or_closed_session_is_404(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw:
        s = gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=3))
        s.close()
        assert _post(s.base_url, {"model": SERVE, "messages": MSG}).status_code == 404
        assert _post(f"{gw.url}/s/nope/v1", {"model": SERVE, "messages": MSG}).status_code == 404


def test_models_lists_only_the_pinned_model_and_bearer_key_works(seen: list[dict[str, Any]]) -> None:
    with _gw(seen) as gw, gw.open_session("http://up/v1", SessionPolicy(model=SERVE, max_tokens=3)) as s:
        assert [m["id"] for m in httpx.get(f"{s.base_url}/models").json()["data"]] == [SERVE]
        r = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": SERVE, "messages": MSG},
                       headers={"Authorization": f"Bearer {s.key}"})
        assert r.status_code == 200 and len(s.calls) == 1


def test_adapter_digest_from_the_endpoints_root(seen: list[dict[str, Any]], tmp_path: Path) -> None:
    """vLLM lists a LoRA's directory as its `root`: the gateway hashes the weights the endpoint loaded."""
    d = tmp_path / "adapter"
    d.mkdir()
    (d / "adapter_model.safetensors").write_bytes(b"other weights")  # not what the manifest says
    with _gw(seen, root=str(d)) as gw, gw.open_session("http://up/v1", SessionPolicy(
            model=SERVE, max_tokens=3, adapter_sha256=SHA)) as s:
        _post(s.base_url, {"model": SERVE, "messages": MSG})
        c = s.calls[0]
        assert c.adapter_check == "endpoint-root"
        assert c.adapter_sha256 == hashlib.sha256(b"other weights").hexdigest() != c.expected_adapter_sha256


def test_endpoint_errors_pass_through_and_are_recorded() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"message": "The model does not exist.", "code": 404}})

    with Gateway(transport=httpx.MockTransport(handler)) as gw, gw.open_session(
            "http://up/v1", SessionPolicy(model=SERVE, max_tokens=3)) as s:
        r = _post(s.base_url, {"model": SERVE, "messages": MSG})
        assert r.status_code == 404 and s.calls[0].status == 404 and s.calls[0].response is None


def test_sha8_of_serve_name() -> None:
    assert sha8_of_serve_name("default-g3-0123abcd") == "0123abcd"
    assert sha8_of_serve_name("SmolLM2-135M-Instruct") is None
