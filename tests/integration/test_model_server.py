"""The real embedded server (SmolLM2-135M on the CPU) through the real client, on each engine kind.

One server per module and engine (torch, llama), started from an unrelated cwd the way a user would; one more start for
`ensure_server`. Adapters are tiny random PEFT LoRAs made on the fly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rsi.models.client import ChatClient, ModelRequestError
from rsi.models.embedded import DEFAULT_MODEL_ID, EMBEDDED_ENDPOINT, cache_dir, ensure_server
from rsi.train.peft_dir import write_identity_adapter
from tests.raycluster import free_port
from tests.served_model import served_model

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

Q = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module", params=["torch", "llama"])
def server(model_ready: None, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[str]:
    """The server on one engine kind: every test that uses it is a conformance test of both engines."""
    if request.param == "llama":
        request.getfixturevalue("llama_ready")
    cwd = tmp_path_factory.mktemp("elsewhere")  # the server must not depend on the repo as cwd
    with served_model(cwd, cwd=cwd, args=("--engine", request.param)) as port:
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def client(server: str) -> Iterator[ChatClient]:
    with ChatClient(server, timeout=300, max_attempts=2) as c:
        yield c


def make_random_adapter(out: Path, seed: int = 0) -> Path:
    """A rank-4 LoRA on q_proj/v_proj with random (non-zero) weights, saved as a PEFT directory."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    model_dir = next((cache_dir() / "models").glob(f"{DEFAULT_MODEL_ID}-*/config.json")).parent
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, cfg).save_pretrained(str(out))
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    return out


@pytest.fixture(scope="module")
def random_adapter(server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_random_adapter(tmp_path_factory.mktemp("adapter") / "lora")


def test_models_lists_the_base(client: ChatClient) -> None:
    assert client.list_models() == [DEFAULT_MODEL_ID]


def test_chat_returns_text_and_usage(client: ChatClient) -> None:
    res = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=24)
    assert res.content and res.content.strip()
    assert res.usage.prompt_tokens > 5 and 0 < res.usage.completion_tokens <= 24 and res.usage.calls == 1
    assert res.finish_reason in ("stop", "length")


def test_max_tokens_and_stop_are_honoured(client: ChatClient) -> None:
    res = client.chat(DEFAULT_MODEL_ID, [{"role": "user", "content": "Count from 1 to 30."}], max_tokens=5)
    assert res.usage.completion_tokens == 5 and res.finish_reason == "length"
    full = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=24).content or ""
    word = full.split()[1]
    cut = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=24, stop=[word]).content or ""
    assert word not in cut and full.startswith(cut)


def test_greedy_is_deterministic(client: ChatClient) -> None:
    a = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=32, temperature=0)
    b = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=32, temperature=0)
    assert a.content == b.content


def test_seeded_sampling_reproduces(client: ChatClient) -> None:
    a = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=24, temperature=1.0, seed=7)
    b = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=24, temperature=1.0, seed=7)
    assert a.content == b.content


def test_unknown_model_is_a_404_request_error(client: ChatClient) -> None:
    with pytest.raises(ModelRequestError) as e:
        client.chat("no-such-model", Q, max_tokens=4)
    assert e.value.status_code == 404 and "no-such-model" in str(e.value)


def test_context_overflow_is_a_400_request_error(client: ChatClient) -> None:
    with pytest.raises(ModelRequestError, match="maximum context length") as e:
        client.chat(DEFAULT_MODEL_ID, Q, max_tokens=100_000)
    assert e.value.status_code == 400


def test_bad_body_is_400_in_openai_shape(server: str) -> None:
    r = httpx.post(f"{server}/chat/completions", json={"model": DEFAULT_MODEL_ID}, timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "messages" in err["message"] and err["code"] == 400 and err["type"] == "BadRequestError"


def test_adapter_load_serve_and_unload(client: ChatClient, random_adapter: Path) -> None:
    base_before = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=16).content
    client.load_adapter("rand-a", str(random_adapter))
    try:
        assert client.list_models() == [DEFAULT_MODEL_ID, "rand-a"]
        with pytest.raises(ModelRequestError, match="already"):
            client.load_adapter("rand-a", str(random_adapter))
        lora = client.chat("rand-a", Q, max_tokens=16)
        assert lora.model == "rand-a" and lora.content != base_before
        assert client.chat(DEFAULT_MODEL_ID, Q, max_tokens=16).content == base_before

        # base and adapter at once (one mixed batch) answer as they do alone
        with ThreadPoolExecutor(4) as pool:
            names = [DEFAULT_MODEL_ID, "rand-a", DEFAULT_MODEL_ID, "rand-a"]
            texts = list(pool.map(lambda n: client.chat(n, Q, max_tokens=16).content, names))
        assert texts == [base_before, lora.content, base_before, lora.content]
    finally:
        client.unload_adapter("rand-a")
    assert client.list_models() == [DEFAULT_MODEL_ID]
    with pytest.raises(ModelRequestError) as e:
        client.chat("rand-a", Q, max_tokens=4)
    assert e.value.status_code == 404
    with pytest.raises(ModelRequestError, match="cannot be found"):
        client.unload_adapter("rand-a")
    assert client.chat(DEFAULT_MODEL_ID, Q, max_tokens=16).content == base_before


def test_an_identity_copy_of_a_lora_answers_as_the_base(client: ChatClient, random_adapter: Path,
                                                        tmp_path: Path) -> None:
    """What `rsi update` seeds a new Mixture-of-LoRA specialist with when it has nothing to train on: the random
    LoRA's file with its B matrices zeroed answers exactly as the base model does (the LoRA itself does not)."""
    named = json.loads((random_adapter / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    ident = write_identity_adapter(random_adapter, tmp_path / "ident", named or DEFAULT_MODEL_ID)
    base = client.chat(DEFAULT_MODEL_ID, Q, max_tokens=16).content
    client.load_adapter("rand-ident", str(ident.path))
    client.load_adapter("rand-full", str(random_adapter))
    try:
        assert client.chat("rand-ident", Q, max_tokens=16).content == base
        assert client.chat("rand-full", Q, max_tokens=16).content != base
    finally:
        client.unload_adapter("rand-ident")
        client.unload_adapter("rand-full")


def test_loading_a_non_adapter_directory_is_a_request_error(client: ChatClient, tmp_path: Path) -> None:
    with pytest.raises(ModelRequestError, match="adapter_config.json"):
        client.load_adapter("bogus", str(tmp_path))


def test_ensure_server_starts_and_stops_the_embedded_server(
    model_ready: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, random_adapter: Path
) -> None:
    port = free_port()
    monkeypatch.setenv("RSI_MODEL_PORT", str(port))
    monkeypatch.setenv("RSI_MODEL_MAX_BATCH", "4")  # this server also checks batched decoding
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "serve.log"
    with ensure_server(EMBEDDED_ENDPOINT, log_path=log) as (url, started):
        assert url == f"http://127.0.0.1:{port}/v1" and started is True
        with ChatClient(url, timeout=300) as c:
            assert c.list_models() == [DEFAULT_MODEL_ID]
            # a mixed batch routes each row to its own model: base rows and adapter rows differ,
            # and base rows begin as the base does alone (exact text may differ by rounding)
            c.load_adapter("rand-b", str(random_adapter))
            solo = (c.chat(DEFAULT_MODEL_ID, Q, max_tokens=12).content or "").split()[:2]
            with ThreadPoolExecutor(4) as pool:
                names = [DEFAULT_MODEL_ID, "rand-b", DEFAULT_MODEL_ID, "rand-b"]
                res = list(pool.map(lambda n: c.chat(n, Q, max_tokens=12), names))
            assert [r.model for r in res] == names
            base_texts = {r.content for r in res if r.model == DEFAULT_MODEL_ID}
            lora_texts = {r.content for r in res if r.model == "rand-b"}
            assert not base_texts & lora_texts
            assert all((t or "").split()[:2] == solo for t in base_texts)
            # a second user of the same endpoint reuses it and does not own it
            with ensure_server(EMBEDDED_ENDPOINT) as (url2, started2):
                assert (url2, started2) == (url, False)
            assert c.healthy()
    with ChatClient(url, max_attempts=1) as c:
        assert not c.healthy(), "the server ensure_server started is still answering"
    assert log.read_text(), "the server log is empty"


def test_ensure_server_never_starts_a_remote_endpoint() -> None:
    with ensure_server("http://127.0.0.1:9/v1") as (url, started):
        assert (url, started) == ("http://127.0.0.1:9/v1", False)
        with ChatClient(url, max_attempts=1) as c:
            assert not c.healthy(), "something was started for a non-embedded endpoint"


def _sse(url: str, body: dict) -> tuple[str, str | None, dict | None]:  # type: ignore[type-arg]
    """(joined content, finish_reason, usage) of one streamed completion."""
    text, finish, usage = "", None, None
    with httpx.stream("POST", url, json={**body, "stream": True, "stream_options": {"include_usage": True}},
                      timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            chunk = json.loads(line[len("data: "):])
            assert chunk["object"] == "chat.completion.chunk"
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
    return text, finish, usage


def test_streaming_sends_the_same_text_as_non_streaming(server: str) -> None:
    url = f"{server}/chat/completions"
    for extra in ({}, {"stop": ["\n```\n", "."]}):
        body = {"model": DEFAULT_MODEL_ID, "messages": Q, "max_tokens": 24, "temperature": 0, **extra}
        plain = httpx.post(url, json=body, timeout=300).json()
        text, finish, usage = _sse(url, body)
        choice = plain["choices"][0]
        assert text == choice["message"]["content"] and finish == choice["finish_reason"]
        assert usage is not None and usage["completion_tokens"] == plain["usage"]["completion_tokens"]


def test_usage_reports_the_prompt_tokens_the_prefix_cache_supplied(client: ChatClient) -> None:
    msgs = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a fruit."}]
    first = client.chat(DEFAULT_MODEL_ID, msgs, max_tokens=12)
    turn2 = [*msgs, {"role": "assistant", "content": first.content}, {"role": "user", "content": "Another one."}]
    second = client.chat(DEFAULT_MODEL_ID, turn2, max_tokens=12)
    assert second.usage.cached_tokens > 0.5 * second.usage.prompt_tokens
    assert second.raw["usage"]["prompt_tokens_details"]["cached_tokens"] == second.usage.cached_tokens


def test_an_abandoned_request_frees_the_engine_at_once(server: str) -> None:
    """The client gives up on a long generation; the next request is answered at once (on the
    http.server engine it waited for all 3000 tokens, minutes on a CPU). The prompt is a count the model
    carries on without end, so the request outlives the client's patience on any engine."""
    count = ", ".join(str(i) for i in range(1, 41)) + ","
    long = {"model": DEFAULT_MODEL_ID, "prompt": count, "max_tokens": 3000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/completions", json=long, timeout=httpx.Timeout(2.0, connect=10.0))
    with httpx.stream("POST", f"{server}/completions", json={**long, "stream": True}, timeout=60) as r:
        next(r.iter_lines())  # a stream dropped early
    t0 = time.monotonic()
    quick = httpx.post(f"{server}/chat/completions", json={"model": DEFAULT_MODEL_ID, "messages": Q, "max_tokens": 4},
                       timeout=120)
    assert quick.status_code == 200 and time.monotonic() - t0 < 30
    health = httpx.get(server.removesuffix("/v1") + "/health", timeout=10).json()
    assert health["running"] == 0 and health["queued"] == 0 and health["sizing"]["max_queue"] >= 1
