"""The choice constraint: the server scores the labels (never samples), answers label + margin, and refuses
every constraint field it does not serve with 400 (vLLM would ignore it and answer unconstrained)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("fastapi")
torch = pytest.importorskip("torch")

from fastapi.testclient import TestClient  # noqa: E402

from rsi.core.mol import choice_regex, regex_labels  # noqa: E402
from rsi.models.server.app import create_app  # noqa: E402
from rsi.models.server.choice import margin, score_labels  # noqa: E402
from rsi.models.server.decode import GenRequest, GenResult  # noqa: E402
from rsi.models.server.engine import Job  # noqa: E402

MODEL = "fake-model"
LABELS = ["L0", "L1", "L2"]


class ChoiceEngine:
    """Scores choice requests from a fixed table, as the engine's worker would answer them."""

    model_id = MODEL

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.requests: list[GenRequest] = []

    def model_ids(self) -> list[str]:
        return [MODEL]

    def info(self) -> dict[str, Any]:
        return {}

    def submit(self, req: GenRequest, on_delta: Any = None) -> Job:
        self.requests.append(req)
        job = Job(req, on_delta)
        assert req.choice is not None
        sc = {lab: self.scores[lab] for lab in req.choice}
        best = max(sc, key=lambda k: sc[k])
        threading.Thread(target=lambda: job._resolve(GenResult(
            text=best, tool_calls=[], finish_reason="stop", prompt_tokens=7, completion_tokens=1,
            cached_tokens=4, choice_scores=sc))).start()
        return job


def _post(body: dict[str, Any], scores: dict[str, float] | None = None) -> Any:
    eng = ChoiceEngine(scores or {"L0": -3.0, "L1": -0.5, "L2": -2.0})
    r = TestClient(create_app(eng)).post(  # type: ignore[arg-type]
        "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "route"}], **body})
    return r, eng


def test_choice_answers_the_best_label_with_its_margin() -> None:
    r, eng = _post({"structured_outputs": {"choice": LABELS}})
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    assert ch["message"]["content"] == "L1"
    assert ch["choice"]["label"] == "L1" and ch["choice"]["margin"] == pytest.approx(1.5)
    assert eng.requests[0].choice == LABELS


def test_sglang_regex_of_literal_labels_is_the_same_constraint() -> None:
    assert regex_labels(choice_regex(LABELS)) == LABELS
    assert regex_labels("^(a\\.b|c)$") == ["a.b", "c"]
    assert regex_labels("L[0-9]") is None and regex_labels("(L.|L1)") is None
    r, eng = _post({"regex": choice_regex(LABELS)})
    assert r.status_code == 200 and eng.requests[0].choice == LABELS


@pytest.mark.parametrize("body", [
    {"guided_choice": LABELS},
    {"guided_regex": "L[0-2]"},
    {"guided_json": {"type": "object"}},
    {"structured_outputs": {"choice": LABELS, "regex": "L."}},
    {"structured_outputs": {"json": {"type": "object"}}},
    {"structured_outputs": {"choice": []}},
    {"structured_outputs": {"choice": ["L0", "L0"]}},
    {"response_format": {"type": "json_object"}, "structured_outputs": {"choice": LABELS}},
    {"structured_outputs": {"choice": LABELS}, "n": 2},
    {"structured_outputs": {"choice": LABELS}, "logprobs": True},
    {"regex": "L[0-9]+"},
    {"structured_outputs": {"choice": LABELS}, "stream": True},
])
def test_constraints_it_does_not_serve_are_refused_with_400(body: dict[str, Any]) -> None:
    r, eng = _post(body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == 400 and not eng.requests


def _tiny_model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


@torch.inference_mode()
def test_label_scores_equal_the_full_sequence_log_probability() -> None:
    """One prompt prefill + one batched pass over the labels gives each label's exact log-probability."""
    from transformers import DynamicCache

    from rsi.models.server.kv_cache import cache_layers

    model = _tiny_model()
    prompt = torch.tensor([[3, 9, 4, 17, 22, 8]])
    # shared contexts (L0..L3 are `L` + digit), a context that begins another, a one-token label, two rows
    for labels in ([[5, 11], [5, 12, 30], [40]], [[5, 11], [5, 12], [5, 13], [5, 14]],
                   [[5, 11], [6, 12], [5, 13, 2], [40]]):
        cache = DynamicCache()
        out = model(input_ids=prompt, cache=cache, use_cache=True)
        kv = cache_layers(cache)
        before = [k.clone() for k, _ in kv]
        got = score_labels(model, kv, out.logits[0, -1], labels, None)
        assert all(torch.equal(k, b) for (k, _), b in zip(kv, before, strict=True))  # the prompt's KV kept
        for ids, score in zip(labels, got, strict=True):
            full = torch.cat([prompt[0], torch.tensor(ids)])[None]
            logp = torch.log_softmax(model(input_ids=full).logits[0].float(), dim=-1)
            n = prompt.shape[1]
            want = sum(float(logp[n - 1 + j, t]) for j, t in enumerate(ids))
            assert score == pytest.approx(want, abs=1e-4)
        assert margin(got) == pytest.approx(sorted(got)[-1] - sorted(got)[-2])


def test_labels_that_share_a_context_share_one_row() -> None:
    from rsi.models.server.choice import label_rows

    assert label_rows([[60, 32], [60, 33], [60, 34], [60, 35]]) == ([(60,)], [0, 0, 0, 0])
    assert label_rows([[5, 11], [5, 12, 30], [40]]) == ([(5, 12)], [0, 0, -1])
    assert label_rows([[5, 11], [6, 12], [5, 13, 2]]) == ([(5, 13), (6,)], [0, 1, 0])


@torch.inference_mode()
def test_a_common_label_prefix_prefilled_with_the_prompt_scores_the_same() -> None:
    """The route in one pass: the labels' common first tokens go into the prompt's prefill; every label's score
    is still its exact log-probability."""
    from transformers import DynamicCache

    from rsi.models.server.choice import common_prefix, prefilled_scores
    from rsi.models.server.kv_cache import cache_layers

    model = _tiny_model()
    prompt = [3, 9, 4, 17, 22, 8]
    assert common_prefix([[60, 32], [60, 33]]) == [60] and common_prefix([[5], [5, 1]]) == []
    for labels in ([[5, 11], [5, 12], [5, 13]], [[5, 7, 11], [5, 7, 12, 30]], [[5, 11], [5, 12, 30]]):
        common = common_prefix(labels)
        assert common
        cache = DynamicCache()
        out = model(input_ids=torch.tensor([prompt + common]), cache=cache, use_cache=True,
                    logits_to_keep=1 + len(common))
        got = prefilled_scores(model, cache_layers(cache), out.logits[0], common, labels, None)
        for ids, score in zip(labels, got, strict=True):
            logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + ids])).logits[0].float(), dim=-1)
            want = sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(ids))
            assert score == pytest.approx(want, abs=1e-4)
