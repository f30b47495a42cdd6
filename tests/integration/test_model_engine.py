"""The embedded engine in-process on the real SmolLM2: the prefix cache keeps greedy answers, never
crosses adapters, stays within its byte budget; streaming sends the same text; int8 kernels keep
PEFT adapters serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rsi.models.server.engine import Engine, GenRequest

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

SYSTEM = (
    "You are a shell agent working in a Linux sandbox. Each turn, reply with exactly one bash command "
    "in a ```bash block. You will see its output. When the task is done, reply DONE."
)
TASKS = [
    "Task: Write the number of lines in /app/data.csv to /app/count.txt.",
    "Task: Create a directory /app/out and copy every .log file from /var/log into it.",
    "Task: Print the largest file under /app.",
]
BUDGET_MB = 16


@pytest.fixture(scope="module")
def engine(model_ready: None) -> Iterator[Engine]:
    from rsi.models.server.engine import Engine
    from rsi.models.sizing import size_server

    eng = Engine(sizing=size_server(max_batch=1, prefix_cache_mb=BUDGET_MB, env={}))
    yield eng
    eng.close()


def _req(engine: Engine, messages: list[dict[str, Any]], **kw: Any) -> GenRequest:
    from rsi.models.server.engine import GenRequest

    kw.setdefault("max_tokens", 40)
    return GenRequest(model=kw.pop("model", engine.model_id), messages=messages, **kw)


def _two_turns(engine: Engine, task: str, model: str | None = None) -> list[dict[str, Any]]:
    """Turn 1 of a conversation, answered, plus an observation: turn 2's messages."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    first = engine.generate(_req(engine, msgs, model=model or engine.model_id))
    return [*msgs, {"role": "assistant", "content": first.text}, {"role": "user", "content": "ok\n[exit code 0]"}]


def test_cached_and_uncached_greedy_answers_are_identical(engine: Engine) -> None:
    eng = engine
    for task in TASKS:
        eng.prefix_cache.clear()
        turn2 = _two_turns(eng, task)
        cached = eng.generate(_req(eng, turn2))
        assert cached.cached_tokens > 0.6 * cached.prompt_tokens, "turn 2 did not reuse turn 1's KV"
        eng.prefix_cache.clear()
        cold = eng.generate(_req(eng, turn2))
        assert cold.cached_tokens == 0
        assert cached.completion_ids == cold.completion_ids, task


def test_speculation_keeps_greedy_answers_and_saves_forward_passes(engine: Engine) -> None:
    """Prompt lookup on (the fixture's default sizing) against off: the same greedy tokens, the same
    logprobs up to rounding, fewer forward passes than tokens on agent turns that repeat their prompt;
    a sampled request is speculated and reproduced by its seed."""
    from rsi.models.server.engine import Engine
    from rsi.models.sizing import size_server

    assert engine.sizing.speculate > 0
    plain = Engine(sizing=size_server(max_batch=1, prefix_cache_mb=0, speculate=0, env={}))
    try:
        before = dict(engine.decode_stats)
        for task in TASKS:
            turn2 = _two_turns(plain, task)
            for msgs in (turn2[:2], turn2):
                a = plain.generate(_req(plain, msgs, max_tokens=80, logprobs=True))
                b = engine.generate(_req(engine, msgs, max_tokens=80, logprobs=True))
                assert b.completion_ids == a.completion_ids and b.text == a.text, task
                assert a.logprobs is not None and b.logprobs is not None
                assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3
        forwards = engine.decode_stats["forwards"] - before["forwards"]
        tokens = engine.decode_stats["tokens"] - before["tokens"]
        assert tokens > 1.2 * forwards, (tokens, forwards)
        assert plain.decode_stats["tokens"] == plain.decode_stats["forwards"]
        # a sampled request is speculated too, and its seed still reproduces its answer
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[0]}]
        before = dict(engine.decode_stats)
        one, two = (engine.generate(_req(engine, msgs, max_tokens=60, temperature=0.7, top_p=0.95, seed=11))
                    for _ in range(2))
        assert one.completion_ids == two.completion_ids
        assert engine.decode_stats["tokens"] - before["tokens"] > engine.decode_stats["forwards"] - before["forwards"]
    finally:
        plain.close()


def test_the_cache_stays_within_its_byte_budget(engine: Engine) -> None:
    cache = engine.prefix_cache
    cache.clear()
    before = cache.stats.evictions
    for i in range(6):
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{TASKS[i % 3]} Attempt {i}. " * 2}]
        engine.generate(_req(engine, msgs, max_tokens=24))
        assert 0 < cache.nbytes <= BUDGET_MB << 20
    assert cache.stats.evictions > before, "six long prompts should not all fit in the budget"


def test_adapter_requests_never_reuse_another_adapters_kv(engine: Engine, tmp_path: Path) -> None:
    from tests.integration.test_model_server import make_random_adapter

    eng = engine
    a = make_random_adapter(tmp_path / "a", seed=1)
    b = make_random_adapter(tmp_path / "b", seed=2)
    eng.load_adapter("iso-a", str(a))
    eng.load_adapter("iso-b", str(b))
    try:
        eng.prefix_cache.clear()
        turn2 = _two_turns(eng, TASKS[0], model="iso-a")
        on_a = eng.generate(_req(eng, turn2, model="iso-a"))
        assert on_a.cached_tokens > 0
        for other in ("iso-b", eng.model_id):
            res = eng.generate(_req(eng, turn2, model=other))
            assert res.cached_tokens == 0, f"{other} reused iso-a's KV"
        # and B's answer is B's own: the same as B computes with an empty cache
        again_b = eng.generate(_req(eng, turn2, model="iso-b"))
        eng.prefix_cache.clear()
        cold_b = eng.generate(_req(eng, turn2, model="iso-b"))
        assert again_b.completion_ids == cold_b.completion_ids and cold_b.completion_ids != on_a.completion_ids
        # a name unloaded and loaded again with other weights starts with no KV
        eng.unload_adapter("iso-a")
        eng.load_adapter("iso-a", str(b))
        assert eng.generate(_req(eng, turn2, model="iso-a")).cached_tokens == 0
    finally:
        for name in ("iso-a", "iso-b"):
            if name in eng.adapters:
                eng.unload_adapter(name)


def test_streamed_deltas_join_to_the_answer(engine: Engine) -> None:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[1]}]
    plain = engine.generate(_req(engine, msgs, stop=["\n```\n"]))
    deltas: list[str] = []
    job = engine.submit(_req(engine, msgs, stop=["\n```\n"]), on_delta=deltas.append)
    streamed = job.wait(300)
    assert "".join(deltas) == streamed.text == plain.text


def test_a_cancelled_request_leaves_the_engine_at_once(engine: Engine) -> None:
    import time

    long = [{"role": "user", "content": "Count from 1 to 5000, one number per line."}]
    job = engine.submit(_req(engine, long, max_tokens=2000))
    time.sleep(1.0)
    t0 = time.monotonic()
    job.cancel()
    quick = engine.generate(_req(engine, [{"role": "user", "content": "Hi"}], max_tokens=2), timeout=60)
    assert quick.completion_tokens >= 1 and time.monotonic() - t0 < 15
    assert job.done.is_set() and job.error is not None and "cancelled" in str(job.error)


def test_a_choice_request_is_served_between_decode_steps_of_a_full_batch(engine: Engine) -> None:
    """With the one batch row taken by a long answer, a route hop (choice) is answered while that answer is
    still decoding, not after it; a plain request queued behind it still waits; the long answer's greedy
    tokens are the same as when it runs undisturbed."""
    import time

    long = [{"role": "user", "content": "Count from 1 to 5000, one number per line."}]
    alone = engine.generate(_req(engine, long, max_tokens=120), timeout=300)
    assert alone.completion_tokens >= 60, "precondition: the long answer must outlast one route hop"
    job = engine.submit(_req(engine, long, max_tokens=120))
    deadline = time.monotonic() + 60
    while engine.info()["running"] == 0:  # the long answer holds the batch's one row
        assert time.monotonic() < deadline and not job.done.is_set()
        time.sleep(0.01)
    plain = engine.submit(_req(engine, [{"role": "user", "content": "Hi"}], max_tokens=2))
    route = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[0]},
             {"role": "user", "content": "Which adapter answers? Reply with one label."}]
    pick = engine.generate(_req(engine, route, choice=["L0", "L1", "L2"]), timeout=300)
    assert pick.text in ("L0", "L1", "L2")
    assert not job.done.is_set(), "the route hop waited for the whole long answer"
    assert not plain.done.is_set(), "a plain request jumped the queue too"
    assert job.wait(300).completion_ids == alone.completion_ids
    assert plain.wait(300).completion_tokens >= 1


def test_a_route_in_one_pass_scores_as_the_two_pass_route(engine: Engine) -> None:
    """The labels' common first token (`L` of L0..L3) prefilled with the prompt: the same label and scores as
    the prompt's prefill followed by a pass over the labels; the cache keeps the prompt and that token, so the
    next turn's prompt (which continues with the chosen label) reuses both."""
    route = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[1]},
             {"role": "user", "content": "Which adapter answers? Reply with one label."}]
    labels = ["L0", "L1", "L2", "L3"]
    try:
        engine.choice_one_pass = False
        engine.prefix_cache.clear()
        two = engine.generate(_req(engine, route, choice=labels), timeout=300)
        engine.choice_one_pass = True
        engine.prefix_cache.clear()
        one = engine.generate(_req(engine, route, choice=labels), timeout=300)
    finally:
        engine.choice_one_pass = True
    assert one.text == two.text and one.choice_scores and two.choice_scores
    for lab in labels:
        assert one.choice_scores[lab] == pytest.approx(two.choice_scores[lab], abs=2e-3)
    nxt = engine.generate(_req(engine, [*route, {"role": "assistant", "content": one.text},
                                        {"role": "user", "content": "ok"}], max_tokens=1), timeout=300)
    assert nxt.cached_tokens == one.prompt_tokens + 1  # the prompt and the label's first token


def test_int8_kernels_still_serve_a_peft_adapter(model_ready: None, tmp_path: Path) -> None:
    from rsi.models.server.engine import Engine
    from rsi.models.sizing import size_server
    from tests.integration.test_model_server import make_random_adapter

    eng = Engine(sizing=size_server(max_batch=1, prefix_cache_mb=0, kernels="int8", env={}))
    try:
        assert eng.kernels == "int8"
        msgs = [{"role": "user", "content": "Name three colours."}]
        base = eng.generate(_req(eng, msgs, max_tokens=12))
        eng.load_adapter("q-a", str(make_random_adapter(tmp_path / "a", seed=1)))
        lora = eng.generate(_req(eng, msgs, model="q-a", max_tokens=12))
        assert base.text and lora.text and lora.completion_ids != base.completion_ids
        assert eng.generate(_req(eng, msgs, max_tokens=12)).completion_ids == base.completion_ids
    finally:
        eng.close()
