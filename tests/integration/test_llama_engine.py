"""The llama.cpp engine in-process on the real SmolLM2 GGUF (widened to F16): the base and a PEFT adapter
served through llama.cpp compute what the torch engine computes (the q/k row order and the scale right), KV
slots are reused within an adapter and never across, a reloaded adapter never sees its old KV, cancellation
frees the engine, and choices score as on torch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.test_model_server import make_random_adapter

if TYPE_CHECKING:
    from rsi.models.server.llama_engine import LlamaEngine

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

SYSTEM = "You are a shell agent. Reply with one bash command in a ```bash block; when done, reply DONE."
TASK = "Task: Write the number of lines in /app/data.csv to /app/count.txt."
TEXTS = [
    "<|im_start|>system\nYou are a shell agent.<|im_end|>\n<|im_start|>user\nCount the lines of `notes.txt` and "
    "write the number to `count.txt`.<|im_end|>\n<|im_start|>assistant\n```bash\nwc -l < notes.txt > count.txt\n"
    "```<|im_end|>",
    "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\nRed, green and blue.<|im_end|>",
]


@pytest.fixture(scope="module")
def engine(llama_ready: None) -> Iterator[LlamaEngine]:
    from rsi.models.server.llama_engine import LlamaEngine
    from rsi.models.sizing import size_server

    eng = LlamaEngine(sizing=size_server(max_batch=2, env={}))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory, engine: LlamaEngine) -> Path:
    return make_random_adapter(tmp_path_factory.mktemp("lora") / "a", seed=3)


def _req(model: str, messages: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    from rsi.models.server.decode import GenRequest

    kw.setdefault("max_tokens", 24)
    return GenRequest(model=model, messages=messages if messages is not None else
                      [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}], **kw)


def _teacher_forced(eng: Any, model: str) -> list[float]:
    out: list[float] = []
    for text in TEXTS:
        r = eng.generate(_req(model, [], prompt=text, prompt_logprobs=0, max_tokens=1))
        out += [float(e.logprob) for e in r.prompt_logprob_content[1:]]
    return out


def test_an_adapter_scores_as_on_the_torch_engine(engine: LlamaEngine, adapter: Path) -> None:
    """Teacher-forced log-probs through the LoRA agree with torch's to the quantization noise the base shows; the
    adapter's own effect is several times that noise (so a wrong q/k row order or scale could not pass)."""
    from rsi.models.server.engine import Engine
    from rsi.models.sizing import size_server

    engine.load_adapter("rand", str(adapter))
    try:
        ll_base, ll_lora = _teacher_forced(engine, engine.model_id), _teacher_forced(engine, "rand")
    finally:
        engine.unload_adapter("rand")
    torch_eng = Engine(sizing=size_server(max_batch=1, prefix_cache_mb=0, speculate=0, env={}))
    try:
        torch_eng.load_adapter("rand", str(adapter))
        t_base, t_lora = _teacher_forced(torch_eng, torch_eng.model_id), _teacher_forced(torch_eng, "rand")
    finally:
        torch_eng.close()

    def mean_abs(a: list[float], b: list[float]) -> float:
        return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)

    noise, served, effect = mean_abs(ll_base, t_base), mean_abs(ll_lora, t_lora), mean_abs(t_lora, t_base)
    # measured: 0.003 on the base (the F16 copy's rounding), 0.003 through the LoRA, 0.96 the LoRA's own effect;
    # the Q4_1 file as it ships differs by ~0.06, a LoRA without llama.cpp's q/k row order by ~0.14
    assert noise < 0.02, f"the base differs between engines by {noise:.4f} nats a token"
    assert served < 2 * noise + 0.01, f"through the LoRA: {served:.4f} nats a token (base {noise:.4f})"
    assert effect > 20 * served, f"the LoRA moves torch's log-probs by only {effect:.3f} (engines differ {served:.4f})"
    assert engine.info()["adapters_sha256"] == {}


def test_a_second_turn_reuses_its_slot_and_answers_as_from_scratch(engine: LlamaEngine) -> None:
    first = engine.generate(_req(engine.model_id))
    turn2: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
             {"role": "assistant", "content": first.text}, {"role": "user", "content": "ok\n[exit code 0]"}]
    cached = engine.generate(_req(engine.model_id, turn2))
    assert cached.cached_tokens > 0.6 * cached.prompt_tokens, "turn 2 did not reuse turn 1's KV"
    for slot in engine._slots:
        engine._clear(slot)
    fresh = engine.generate(_req(engine.model_id, turn2))
    assert fresh.cached_tokens == 0
    assert fresh.completion_ids == cached.completion_ids


def test_adapters_never_reuse_each_others_kv_and_a_reload_starts_clean(engine: LlamaEngine, adapter: Path) -> None:
    engine.generate(_req(engine.model_id))  # the base's KV for this prompt sits in a slot
    engine.load_adapter("rand", str(adapter))
    try:
        sha = engine.info()["adapters_sha256"]["rand"]
        assert len(sha) == 64
        first = engine.generate(_req("rand"))
        assert first.cached_tokens == 0, "the adapter's prefill reused the base's KV"
        again = engine.generate(_req("rand"))
        assert again.cached_tokens > 0 and again.completion_ids == first.completion_ids
    finally:
        engine.unload_adapter("rand")
    engine.load_adapter("rand", str(adapter))
    try:
        assert engine.generate(_req("rand")).cached_tokens == 0, "a reloaded adapter saw its old KV"
    finally:
        engine.unload_adapter("rand")
    assert all(s.key in ("", engine.model_id) for s in engine._slots)


def test_a_cancelled_request_leaves_the_engine_at_once(engine: LlamaEngine) -> None:
    long = _req(engine.model_id, [{"role": "user", "content": "Count from 1 to 3000, one per line."}],
                max_tokens=3000)
    job = engine.submit(long)
    time.sleep(0.5)
    job.cancel()
    t0 = time.monotonic()
    quick = engine.generate(_req(engine.model_id, max_tokens=4), timeout=60)
    assert quick.completion_tokens == 4 and time.monotonic() - t0 < 20
    assert job.done.wait(5) and job.error is not None
    assert all(s.row is None for s in engine._slots)


def test_concurrent_requests_share_the_batch_and_free_their_slots(engine: LlamaEngine) -> None:
    alone = [engine.generate(_req(engine.model_id, [{"role": "user", "content": f"Say the number {i}."}]))
             for i in range(3)]
    results: list[Any] = [None] * 3

    def run(i: int) -> None:
        results[i] = engine.generate(_req(engine.model_id, [{"role": "user", "content": f"Say the number {i}."}]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r.completion_tokens > 0 for r in results] == [True] * 3
    # a batch of two rounds differently from one row: the answers begin alike
    assert all(r.completion_ids[:3] == a.completion_ids[:3] for r, a in zip(results, alone, strict=True))
    assert all(s.row is None for s in engine._slots)


def test_a_choice_is_the_label_torch_picks(engine: LlamaEngine) -> None:
    from rsi.models.server.engine import Engine
    from rsi.models.sizing import size_server

    msgs = [{"role": "user", "content": "Which of these is a colour? Answer with the label."}]
    labels = ["L0 red", "L1 table", "L2 seven"]
    got = engine.generate(_req(engine.model_id, msgs, choice=labels))
    torch_eng = Engine(sizing=size_server(max_batch=1, speculate=0, env={}))
    try:
        ref = torch_eng.generate(_req(torch_eng.model_id, msgs, choice=labels))
    finally:
        torch_eng.close()
    assert got.text == ref.text and got.choice_scores is not None and ref.choice_scores is not None
    for lab in labels:
        assert abs(got.choice_scores[lab] - ref.choice_scores[lab]) < 1.0


def test_the_default_batch_is_what_the_engine_reports(llama_ready: None) -> None:
    """Unless set by hand the llama engine batches DEFAULT_MAX_BATCH rows, and the sizing it prints at start and
    shows on /health says so (it said the torch sizing's 1 while batching 4)."""
    from rsi.models.server.llama_engine import DEFAULT_MAX_BATCH, LlamaEngine
    from rsi.models.sizing import size_server

    eng = LlamaEngine(sizing=size_server(env={}, cores=2))
    try:
        assert eng.max_batch == eng.sizing.max_batch == eng.info()["sizing"]["max_batch"] == DEFAULT_MAX_BATCH
        assert f"batch {DEFAULT_MAX_BATCH}," in eng.sizing.summary()
    finally:
        eng.close()


def test_unseeded_sampled_requests_share_the_batch_and_a_seeded_one_still_reproduces(engine: LlamaEngine) -> None:
    """The harness samples without a seed: its concurrent trials' calls decode together (one forward pass gives
    several tokens). A request with a seed runs alone, so the seed gives the same answer whatever else is queued."""
    msgs = [{"role": "user", "content": "Tell me about rivers."}]
    seeded = _req(engine.model_id, msgs, max_tokens=24, temperature=0.9, seed=5)
    alone = engine.generate(seeded)
    before = dict(engine.decode_stats)
    results: list[Any] = [None] * 4

    def run(i: int) -> None:
        req = seeded if i == 3 else _req(engine.model_id, msgs, max_tokens=40, temperature=0.9)
        results[i] = engine.generate(req)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    forwards = engine.decode_stats["forwards"] - before["forwards"]
    tokens = engine.decode_stats["tokens"] - before["tokens"]
    assert tokens > forwards, (tokens, forwards)  # some decode steps served two rows or more
    assert results[3].completion_ids == alone.completion_ids
    assert all(s.row is None for s in engine._slots)
