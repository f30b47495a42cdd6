"""The local backend's fast path (issue 36): a trajectory's turns in one sequence, rows batched with padding,
logits only at completions, bf16 autocast. What could go wrong for a user: a turn trained on log-probabilities
it would not get alone (a wrong mask, a shifted span, padding leaking in), a step without whole trajectories,
bf16 moving the loss curve, the old loop lost. Checked on a tiny random-config Llama with LoRA."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest

from rsi.core.training import TrainSettings
from rsi.train.fit import Batches, Sample
from rsi.train.packing import chain_rows, padded_tokens, plan_forwards, trajectory_batches

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def S(prompt: list[int], completion: list[int], trial: str = "t", **kw: Any) -> Sample:
    base: dict[str, Any] = dict(old_logprobs=None, advantage=0.0, accepted=True, trial=trial)
    base.update(kw)
    return Sample(prompt, completion, **base)


def test_turns_share_a_row_only_where_their_tokens_chain() -> None:
    head, c1, obs, c2 = [1, 2, 3], [4, 5], [6], [7]
    turns = [S(head, c1), S(head + c1 + obs, c2), S([9, 9], [8], trial="u"),
             S([1, 2, 0, 4, 5, 6], [7])]  # same trajectory, but its prompt was rendered differently
    rows = chain_rows(turns)
    assert [r.ids for r in rows] == [head + c1 + obs + c2, [9, 9, 8], [1, 2, 0, 4, 5, 6, 7]]
    assert [(sp.index, sp.start, sp.end) for sp in rows[0].spans] == [(0, 3, 5), (1, 6, 7)]
    # a turn of one trajectory never joins another's row, even with the same tokens
    assert len(chain_rows([S(head, c1, trial="a"), S(head + c1 + obs, c2, trial="b")])) == 2
    fwd = plan_forwards([r for r in rows for _ in range(3)], max_tokens=16)
    assert all(padded_tokens(f) <= 16 for f in fwd) and sum(len(f) for f in fwd) == 9
    assert [len(r.ids) for f in fwd for r in f] == sorted([len(r.ids) for r in rows for _ in range(3)], reverse=True)
    assert plan_forwards([rows[0]], max_tokens=2) == [[rows[0]]]  # a row over the budget still gets a forward
    assert trajectory_batches(turns) == [[0, 1, 3], [2]]


def test_a_packed_step_holds_whole_trajectories_and_at_least_the_batch_size() -> None:
    pool = [S([i], [1], trial=f"t{i // 3}") for i in range(12)]  # 4 trajectories of 3 turns
    b = Batches(pool, TrainSettings(batch_size=4, seed=1))
    for _ in range(6):
        step = b.next()
        trials = {x.trial for x in step}
        assert len(step) == 3 * len(trials) and len(step) >= 4
    one = Batches(pool, TrainSettings(batch_size=4, seed=1, pack=False))
    assert [len(one.next()) for _ in range(5)] == [4] * 5  # the old loop: turns one by one


def tiny_model(seed: int = 0, vocab: int = 64) -> Any:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   pad_token_id=0)
    m = transformers.LlamaForCausalLM(cfg)
    return peft.get_peft_model(m, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))


def trajectories(n: int, vocab: int = 64, seed: int = 1, answer: list[int] | None = None) -> list[Sample]:
    """`n` trajectories of 1-3 turns, random prompts; completions random, or all `answer` (something to learn)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(k: int) -> list[int]:
        return [int(x) for x in torch.randint(1, vocab, (k,), generator=g)]

    out = []
    for t in range(n):
        prompt = rnd(10 + 7 * t)
        for _ in range(1 + t % 3):
            c = list(answer) if answer else rnd(3 + t)
            out.append(S(prompt, c, trial=f"t{t}"))
            prompt = prompt + c + rnd(4)
    return out


def test_packed_and_padded_forwards_give_each_turn_its_own_logprobs_and_gradients() -> None:
    from rsi.train.local import TorchScorer

    m = tiny_model()
    xs = trajectories(5)
    cpu = torch.device("cpu")
    old, new = TorchScorer(m, cpu, pack=False, max_tokens=10_000), TorchScorer(m, cpu, pack=True, max_tokens=10_000)
    assert len(new.split(xs)) == 1 and len(chain_rows(xs)) == 5  # one forward, a row per trajectory, padded
    assert new.counts["all"]["forwards"] == 0

    def grads(scorer: Any) -> tuple[list[Any], Any]:
        m.zero_grad()
        lps = scorer(xs)
        sum(-lp.mean() for lp in lps).backward()
        return [lp.detach() for lp in lps], torch.cat([p.grad.flatten() for p in m.parameters() if p.requires_grad])

    lp_old, g_old = grads(old)
    lp_new, g_new = grads(new)
    assert [len(v) for v in lp_new] == [len(x.completion) for x in xs]
    for a, b in zip(lp_old, lp_new, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(g_old, g_new, atol=1e-5, rtol=1e-4)
    w = new.counts["train"]
    assert (w["forwards"], w["tokens"], w["head"]) == (1, sum(len(r.ids) for r in chain_rows(xs)),
                                                       sum(len(x.completion) for x in xs))
    assert w["padded"] > w["tokens"]  # rows of different lengths were padded, and the padding changed nothing
    # a small budget splits the same samples over several forwards, with the same answers
    small = TorchScorer(m, cpu, pack=True, max_tokens=40)
    parts = small.split(xs)
    assert len(parts) > 1 and sorted(id(x) for p in parts for x in p) == sorted(id(x) for x in xs)
    with torch.no_grad():
        got = {id(x): v for p in parts for x, v in zip(p, small(p), strict=True)}
    for x, a in zip(xs, lp_old, strict=True):
        assert torch.allclose(got[id(x)], a, atol=1e-5)


def test_bf16_autocast_keeps_the_loss_curve_of_fp32() -> None:
    from rsi.train.fit import fit
    from rsi.train.local import TorchScorer

    xs = trajectories(6, answer=[5, 6, 7, 8])
    curves = {}
    for dtype in (None, torch.bfloat16):
        m = tiny_model()
        s = TrainSettings(steps=12, batch_size=4, learning_rate=0.1, kl_coef=0.0, validation_every=100)
        res = fit(m, TorchScorer(m, torch.device("cpu"), pack=True, max_tokens=4096, autocast=dtype), sft=xs, pg=[],
                  validation=[], s=s, kl_coef=0.0, evaluate=xs)
        curves[dtype] = (res.losses, res.logprob_before, res.logprob_after)
    (f32, b0, a0), (b16, b1, a1) = curves[None], curves[torch.bfloat16]
    assert a0 > b0 + 0.25  # it learned something, so the curves have a shape to compare
    assert max(abs(x - y) / abs(x) for x, y in zip(f32, b16, strict=True)) < 0.02
    assert abs(b0 - b1) < 0.02 and abs(a0 - a1) < 0.02


def char_tokenizer(d: Path) -> Any:
    """A character-level ChatML tokenizer (no download): ids 0-3 special, then printable characters."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + list(dict.fromkeys(string.printable)))}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>",
                                               additional_special_tokens=specials[1:3])
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok.save_pretrained(str(d))
    return tok


def test_local_backend_old_and_packed_agree_and_report_throughput(tmp_path: Path) -> None:
    from rsi.train.base import TrainRequest
    from rsi.train.dataset import DatasetLine, write_dataset
    from rsi.train.local import LocalBackend

    tok = char_tokenizer(tmp_path / "base")
    model = tiny_model(vocab=len(tok)).get_base_model()
    model.save_pretrained(str(tmp_path / "base"))
    lines = []
    for i in range(4):
        msgs = [{"role": "system", "content": "You are a shell agent."}, {"role": "user", "content": f"Task {i}"},
                {"role": "assistant", "content": f"```bash\nls /app/{i}\n```"}, {"role": "user", "content": "ok"},
                {"role": "assistant", "content": "DONE"}]
        lines.append(DatasetLine(messages=msgs, tools=[], reward=1.0, accepted=True, group_id=f"g{i}",
                                 sample_index=0, advantage=0.5 if i else 0.0, prompt_messages=2,
                                 provenance={"trial_id": f"tr{i}"}, source="self" if i < 3 else "oracle"))
    info = write_dataset(tmp_path / "ds", lines, {})
    out = {}
    for name, extra in (("old", {"pack": False, "dtype": "float32"}), ("packed", {"dtype": "float32"})):
        s = TrainSettings(steps=2, batch_size=4, kl_coef=0.0, **extra)
        res = LocalBackend().train(TrainRequest(dataset=info.path, output_dir=tmp_path / name, base_model="tiny",
                                                objective="sft+pg", settings=s, base_model_dir=tmp_path / "base",
                                                log=lambda m: None))
        out[name] = res.metrics
        assert json.loads((tmp_path / name / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    old, packed = out["old"], out["packed"]
    # the oracle line trains by SFT only: its advantage never reaches the policy-gradient term
    assert old["pg_samples"] == packed["pg_samples"] == 4  # trajectories 1 and 2, two turns each
    assert old["logprob_before"] == pytest.approx(packed["logprob_before"], abs=1e-5)
    to, tp = old["throughput"], packed["throughput"]
    assert to["train_work"]["forwards"] == 8 and tp["train_work"]["forwards"] == 2  # 4 turns a step vs 1 forward
    assert tp["train_work"]["tokens"] < to["train_work"]["tokens"]  # the shared prefixes ran once
    assert to["trained_tokens"] == tp["trained_tokens"] and tp["samples_per_sec"] > 0
    assert tp["threads"]["inter_op"] == 1 and tp["dtype"] == "float32"


def test_the_parents_logprobs_stay_with_their_own_samples_when_the_scorer_reorders_them() -> None:
    """A packing scorer groups samples by length, not in the order given: the KL reference (the parent's
    log-probabilities, measured before the first step) must still be each sample's own (found by the demo: a
    reference of another sample's length crashed the first step)."""
    import torch

    from rsi.core.training import TrainSettings
    from rsi.train.fit import Sample, fit

    w = torch.nn.Parameter(torch.tensor(0.0))
    model = torch.nn.Module()
    model.w = w  # type: ignore[assignment]

    class LengthSorted:
        def split(self, samples: list[Sample]) -> list[list[Sample]]:
            return [sorted(samples, key=lambda x: len(x.completion))]  # reordered, as packing does

        def __call__(self, samples: list[Sample]) -> list[torch.Tensor]:
            return [torch.log_softmax(torch.stack([w * len(x.completion), torch.tensor(0.0)]), 0)[0]
                    .expand(len(x.completion)) for x in samples]

    samples = [Sample([1], list(range(n)), None, 0.0, True, f"t{n}") for n in (23, 3, 11)]
    res = fit(model, LengthSorted(), sft=samples, pg=[], validation=[], evaluate=samples, kl_coef=0.5,
              s=TrainSettings(steps=2, batch_size=3, learning_rate=0.1))
    assert res.steps == 2 and res.kl_curve[0] == pytest.approx(0.0, abs=1e-9), "step 1: the model is its parent"
    assert res.kl_curve[1] > 0
