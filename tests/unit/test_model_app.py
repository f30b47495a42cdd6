"""The server's HTTP side against a fake engine: OpenAI shapes, SSE framing, a full queue, cached tokens."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("torch")

from fastapi.testclient import TestClient  # noqa: E402

from rsi.models.server.app import create_app  # noqa: E402
from rsi.models.server.decode import GenRequest, GenResult  # noqa: E402
from rsi.models.server.engine import EngineError, Job  # noqa: E402

MODEL = "fake-model"


class FakeEngine:
    """Answers every request with scripted deltas from a thread, as the worker does."""

    def __init__(self, deltas: list[str], *, busy: bool = False) -> None:
        self.model_id = MODEL
        self.deltas = deltas
        self.busy = busy
        self.requests: list[GenRequest] = []

    def model_ids(self) -> list[str]:
        return [MODEL]

    def info(self) -> dict[str, Any]:
        return {"queued": 0, "running": 0, "sizing": {"max_queue": 1}}

    def prompt_ids(self, req: GenRequest) -> list[int]:
        return [1, 2, 3]

    def submit(self, req: GenRequest, on_delta: Any = None) -> Job:
        if req.model != MODEL:
            raise EngineError(f"The model `{req.model}` does not exist.", status=404)
        if self.busy:
            raise EngineError("server busy: 1 requests queued", status=503)
        self.requests.append(req)
        job = Job(req, on_delta)

        def work() -> None:
            for d in self.deltas:
                if on_delta:
                    on_delta(d)
            job._resolve(GenResult(text="".join(self.deltas), tool_calls=[], finish_reason="stop", prompt_tokens=3,
                                   completion_tokens=len(self.deltas), cached_tokens=2, stop_reason="\n```\n"))

        threading.Thread(target=work).start()
        return job


def client(engine: FakeEngine) -> TestClient:
    return TestClient(create_app(engine))  # type: ignore[arg-type]


BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": "\n```\n", "max_tokens": 8}


def test_completion_shape_with_cached_tokens_and_stop_reason() -> None:
    eng = FakeEngine(["```bash\n", "ls"])
    r = client(eng).post("/v1/chat/completions", json=BODY)
    assert r.status_code == 200 and float(r.headers["x-queue-seconds"]) >= 0
    body = r.json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "```bash\nls"}
    assert body["choices"][0]["stop_reason"] == "\n```\n"
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    assert eng.requests[0].stop == ["\n```\n"] and eng.requests[0].max_tokens == 8


def test_stream_is_openai_sse_ending_in_done() -> None:
    c = client(FakeEngine(["a", "b", "c"]))
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[len("data: "):]) for ln in lines[:-1]]
    deltas = [ch["choices"][0]["delta"].get("content") for ch in chunks if ch["choices"]]
    assert deltas[0] == "" and "".join(d or "" for d in deltas) == "abc"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": MODEL}, 400, "messages"),
        ({**BODY, "temperature": -1}, 400, "temperature"),
        ({**BODY, "model": "nope"}, 404, "nope"),
    ],
)
def test_errors_are_openai_shaped(body: dict[str, Any], status: int, words: str) -> None:
    r = client(FakeEngine([])).post("/v1/chat/completions", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert words in err["message"] and err["code"] == status


def test_invalid_json_and_unknown_routes() -> None:
    c = client(FakeEngine([]))
    r = c.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert c.get("/v1/nothing").status_code == 404 and c.get("/v1/nothing").json()["error"]["code"] == 404


def test_a_full_queue_is_a_503_the_client_retries() -> None:
    r = client(FakeEngine([], busy=True)).post("/v1/chat/completions", json=BODY)
    assert r.status_code == 503 and "busy" in r.json()["error"]["message"]


def test_health_says_what_the_engine_runs_with() -> None:
    body = client(FakeEngine([])).get("/health").json()
    assert body["status"] == "ok" and body["sizing"]["max_queue"] == 1
