"""Update that generalises, without a model: the per-template cap, the validation slice (a function of the
template id), replay of earlier generations' accepted trajectories, the KL coefficient's contract floor, the
KL term in the loss and early stopping on a falling validation curve (a tiny torch model stands in for the
LoRA: the loop is the one the local backend runs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.generation import GenerationManifest, GenerationState
from rsi.core.training import TrainSettings, TrialRecord, choose_replay, in_validation, select, template_key
from rsi.loop.context import WorkspaceContext
from rsi.loop.update.phase import UpdateRequest, run_update
from rsi.train.dataset import read_dataset
from rsi.train.fit import EarlyStop
from tests.updatekit import T, add_trials, workspace


def contract(**training: object) -> Contract:
    return Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {"bash": {"description": "b"}}},
                                    "training": training})


def rec(tid: str, task: str, template: str | None, reward: float = 1.0, gen: str = "gen-0000",
        attempt: int = 0) -> TrialRecord:
    return TrialRecord(trial_id=tid, task_digest=f"d-{task}", task_name=task, generation=gen, config_digest="c",
                       attempt=attempt, split="train", reward=reward, error_type=None, integrity="snapshot",
                       tampered=False, turns=2, max_turns=6, actions=(f"distinct reply {tid} " + tid * 9,),
                       template=template)


def templates(n: int, *, validation: bool, fraction: float = 0.2, family: str = "fam") -> list[str]:
    """The first n template ids `fam/tK` that are (or are not) in the validation slice."""
    out = [f"{family}/t{k}" for k in range(400) if in_validation(f"{family}/t{k}", fraction) == validation]
    return out[:n]


def test_validation_slice_is_a_function_of_the_template_id() -> None:
    ids = [f"fam/t{k}" for k in range(1000)]
    chosen = [t for t in ids if in_validation(t, 0.2)]
    assert 0.15 < len(chosen) / len(ids) < 0.25
    assert chosen == [t for t in reversed(ids) if in_validation(t, 0.2)][::-1]  # order and company do not matter
    assert not any(in_validation(t, 0.0) for t in ids)
    assert template_key(None, "old-task") == "task:old-task" and template_key("files/copy", "x") == "files/copy"


def test_validation_templates_are_held_out_of_training_and_measured() -> None:
    (val,) = templates(1, validation=True)
    train = templates(2, validation=False)
    recs = [rec("v-0", "v1", val), rec("v-1", "v1", val, reward=0.0, attempt=1),
            rec("a-0", "a1", train[0]), rec("b-0", "b1", train[1]), rec("b-1", "b1", train[1], 0.0, attempt=1)]
    sel = select(recs, contract())
    assert sel.validation_templates == [val]
    assert sel.validation == ["v-0"] and set(sel.held_out) == {"v-1"}
    assert sorted(sel.accepted) == ["a-0", "b-0"]
    assert "v-1" not in sel.dataset_ids() and "v-0" in sel.dataset_ids()
    assert sel.counts()["validation"]["accepted"] == 1
    # no slice when it would leave nothing to train on, nor when switched off; both say why
    only = select([rec("v-0", "v1", val)], contract())
    assert only.accepted == ["v-0"] and not only.validation and "nothing would be left" in (only.validation_note or "")
    off = select(recs, contract(validation_fraction=0))
    assert not off.validation and len(off.accepted) == 3 and off.validation_note == "validation_fraction is 0"


def test_per_template_cap_keeps_accepted_first_round_robin_over_tasks() -> None:
    big, small = templates(2, validation=False)
    recs = [rec(f"{t}-{i}", t, big, attempt=i) for t in ("p", "q", "r") for i in range(3)]  # 9 accepted
    recs += [rec("p-9", "p", big, reward=0.0, attempt=9)]  # a failure with a signal in p's group
    recs += [rec("s-0", "s", small), rec("s-1", "s", small, reward=0.0, attempt=1)]
    sel = select(recs, contract(per_template_cap=4, validation_fraction=0))
    # best first, interleaved over the template's tasks, so every task is represented before any gets a second
    assert [t for t in sel.accepted if t[0] in "pqr"] == ["p-0", "p-1", "q-0", "r-0"]
    assert len(sel.capped) == 6 and all(v.startswith("template_cap") for v in sel.capped.values())
    assert "p-9" in sel.capped  # the failure comes after the accepted ones and is over the cap
    assert {"s-0", "s-1"} <= set(sel.dataset_ids()) and "s-0" in sel.accepted  # the small template is untouched
    assert sel.counts()["capped"] == 6 and sel.counts()["reasons"]["template_cap"] == 6


def test_replay_spreads_across_templates_within_caps_and_never_validation() -> None:
    (val,) = templates(1, validation=True)
    a, b, c = templates(3, validation=False)
    cands = [rec(f"a{i}", f"ta{i}", a, gen="gen-0000") for i in range(4)]
    cands += [rec(f"b{i}", f"tb{i}", b, gen="gen-0001") for i in range(4)]
    cands += [rec("c-old", "tc", c, gen="gen-0000"), rec("c-new", "tc2", c, gen="gen-0001")]
    cands += [rec("v0", "tv", val, gen="gen-0001")]
    current = {a: 3, b: 0}  # a is well covered now; b and c have nothing this generation
    chosen, why = choose_replay(cands, current, cap=5, per_template_cap=4, validation_fraction=0.2)
    ids = [r.trial_id for r in chosen]
    # round-robin: b and c (nothing current) and a (room for one: cap 4, 3 training now), then b and c again
    assert set(ids) == {"b0", "b1", "c-new", "c-old", "a0"}
    assert set(ids[:2]) == {"b0", "c-new"} and ids.index("c-new") < ids.index("c-old")  # newest generation first
    assert why["v0"].startswith("validation") and why["a1"].startswith("replay_cap")
    # near-duplicates of a trajectory already kept for the task are not replayed
    dup = rec("b-dup", "tb0", b, gen="gen-0000")
    kept = {"d-tb0": [rec("now", "tb0", b)]}
    object.__setattr__(dup, "actions", kept["d-tb0"][0].actions)
    chosen, why = choose_replay([dup], {}, cap=5, per_template_cap=4, validation_fraction=0.2, kept=kept,
                                near_duplicate_threshold=0.95)
    assert not chosen and why["b-dup"] == "near_duplicate: of now"


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceContext]:
    monkeypatch.setenv("RSI_MODEL_PORT", "9")  # nothing answers: no endpoint to load into
    c = workspace(tmp_path)
    yield c
    c.store.close()


def _child_generation(ctx: WorkspaceContext) -> None:
    g0 = ctx.generation("gen-0000")
    ctx.store.put_generation(GenerationManifest(
        id="gen-0001", parent="gen-0000", state=GenerationState.PROMOTED, contract=g0.contract,
        base_model=g0.base_model, harness_config=g0.harness_config))


def test_update_replays_earlier_generations_and_records_it(ctx: WorkspaceContext,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (a, b) = templates(2, validation=False)
    monkeypatch.setattr("rsi.loop.update.phase.task_templates",
                        lambda _ctx: {"digest-old1": a, "digest-old2": b, "digest-new": a})
    add_trials(ctx, [T("old1", 0, 1.0, reply="```bash\necho one > /app/o\n```\n"),
                     T("old2", 0, 1.0, reply="```bash\nprintf two > /app/t\n```\n"),
                     T("old2", 1, 0.0, reply="```bash\nls\n```\n")], job_id="job-g0")
    _child_generation(ctx)
    add_trials(ctx, [T("new", 0, 1.0, generation="gen-0001", reply="```bash\ncp a b\n```\n"),
                     T("new", 1, 0.0, generation="gen-0001", reply="```bash\nmv a b\n```\n")], job_id="job-g1")
    out = run_update(UpdateRequest(gen="gen-0001", backend="export"), ctx.ws.root)
    lines = read_dataset(Path(out.dataset["path"]))
    replayed = [ln for ln in lines if ln.provenance.get("replay")]
    assert {ln.provenance["task"] for ln in replayed} == {"old1", "old2"}
    assert all(ln.accepted and ln.advantage == 0.0 and ln.provenance["generation"] == "gen-0000" for ln in replayed)
    assert b in {ln.provenance["template"] for ln in replayed}  # the template gen-0001 has nothing of
    assert out.replay["used"] == 2 and out.replay["generations"] == ["gen-0000"]
    assert out.dataset["counts"]["replay"] == 2
    run = ctx.store.get_training_run(out.run_id)
    assert run.params["replay"]["used"] == 2 and run.dataset_digest == out.dataset["digest"]
    # the exports (what another trainer would fit) carry the replayed trajectories too
    assert len((Path(out.dataset["path"]).parent / "openai_finetune.jsonl").read_text().splitlines()) == 3


def test_replay_renders_the_head_again_across_an_adopted_prompt_change(ctx: WorkspaceContext,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A config adopted by expand changes gen-0001's prompts: gen-0000's trajectories are replayed with
    their head rendered under the new config (their turns kept); a change to the action format is not
    re-renderable and stays refused."""
    (a, b) = templates(2, validation=False)
    monkeypatch.setattr("rsi.loop.update.phase.task_templates",
                        lambda _ctx: {"digest-old1": a, "digest-old2": b, "digest-new": a})
    g0 = ctx.generation("gen-0000")
    base = ctx.harness_config_for(g0)
    new_prompt = base.model_copy(update={"name": "adopted", "prompt": base.prompt.model_copy(
        update={"system": "NEW SYSTEM for {{ task }} in {{ workdir }}"})})
    other_format = base.model_copy(update={"name": "other-format", "action_format": "tool_calls"})
    d_new, d_fmt = ctx.register_config(new_prompt), ctx.register_config(other_format)
    pv = {"instruction": "Task: old1", "workdir": "/app", "tools": [], "tool_names": [], "finish_word": "DONE",
          "max_turns": 8, "task": "old1"}
    add_trials(ctx, [T("old1", 0, 1.0, reply="```bash\necho one > /app/o\n```\n", prompt_variables=pv),
                     T("old2", 0, 1.0, reply="```bash\nprintf two > /app/t\n```\n", config_digest=d_fmt,
                       prompt_variables={**pv, "task": "old2"})], job_id="job-g0")
    ctx.store.put_generation(GenerationManifest(
        id="gen-0001", parent="gen-0000", state=GenerationState.PROMOTED, contract=g0.contract,
        base_model=g0.base_model, harness_config={"name": "adopted", "digest": d_new}))  # type: ignore[arg-type]
    add_trials(ctx, [T("new", 0, 1.0, generation="gen-0001", config_digest=d_new, reply="```bash\ncp a b\n```\n"),
                     T("new", 1, 0.0, generation="gen-0001", config_digest=d_new, reply="```bash\nmv a b\n```\n")],
               job_id="job-g1")
    out = run_update(UpdateRequest(gen="gen-0001", backend="export"), ctx.ws.root)
    replayed = [ln for ln in read_dataset(Path(out.dataset["path"])) if ln.provenance.get("replay")]
    assert [ln.provenance["task"] for ln in replayed] == ["old1"], out.replay
    ln = replayed[0]
    assert ln.provenance["rerendered"] is True and ln.tokens is None
    assert ln.messages[0] == {"role": "system", "content": "NEW SYSTEM for old1 in /app"}
    assert ln.messages[ln.prompt_messages - 1]["role"] == "user"
    assert ln.messages[ln.prompt_messages]["content"] == "```bash\necho one > /app/o\n```\n"  # its turn kept
    assert out.replay["rerendered"] == 1 and out.replay["refused"].get("mismatch") == 1


def test_kl_coefficient_defaults_positive_and_the_contract_is_a_floor(ctx: WorkspaceContext) -> None:
    assert Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}}}).training.kl_coef > 0
    assert ctx.contract.training.kl_coef > 0  # the shipped contract
    add_trials(ctx, [T("alpha", 0, 1.0)])

    def resolved(value: float | None) -> float:
        path = ctx.ws.root / "rsi.yaml"
        data = yaml.safe_load(path.read_text())
        data["train"]["kl_coef"] = value
        path.write_text(yaml.safe_dump(data))
        out = run_update(UpdateRequest(backend="export"), ctx.ws.root)
        return float(ctx.store.get_training_run(out.run_id).params["settings"]["kl_coef"])

    floor = ctx.contract.training.kl_coef
    assert resolved(None) == floor
    assert resolved(0.0) == floor  # an older rsi.yaml's 0.0 does not turn it off
    assert resolved(0.5) == 0.5


def test_early_stop_on_a_falling_curve() -> None:
    es = EarlyStop(patience=2, tolerance=0.01)
    assert not es.observe(0, -1.0)
    assert not es.observe(8, -0.8)  # new best
    assert not es.observe(16, -0.805)  # within the tolerance: no fall
    assert not es.observe(24, -0.9)  # one fall
    assert not es.observe(32, -0.805)  # back within the tolerance: the run of falls is broken
    assert not es.observe(40, -0.95)
    assert es.observe(48, -1.1)  # two falls in a row
    assert (es.best_step, es.stopped_at, es.fell) == (8, 48, True)
    j = es.as_json()
    assert j["curve"][0] == [0, -1.0] and j["stopped_at"] == 48 and j["best"] == -0.8


# --- the training loop on a bigram table (the same `fit` the local backend runs) ----------------------------

class Bigram:
    """Next-token logits from a table: what `fit` needs of a model (parameters, train, eval)."""

    def __init__(self, vocab: int = 4) -> None:
        import torch

        self.table = torch.nn.Parameter(torch.zeros(vocab, vocab))

    def parameters(self) -> list[Any]:
        return [self.table]

    def train(self) -> None:
        pass

    def eval(self) -> None:
        pass

    def logps(self, x: Any) -> Any:
        import torch

        ids = x.prompt + x.completion
        logits = self.table[torch.tensor(ids[len(x.prompt) - 1 : -1])]
        return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(x.completion)[:, None])[:, 0]


def _sample(completion: list[int], **kw: object) -> Any:
    from rsi.train.fit import Sample

    base: dict[str, object] = dict(prompt=[0], completion=completion, old_logprobs=None, advantage=0.0,
                                   accepted=True, trial="t")
    base.update(kw)
    return Sample(**base)  # type: ignore[arg-type]


def test_a_positive_kl_coef_changes_the_loss_and_holds_the_model_near_its_parent() -> None:
    torch = pytest.importorskip("torch")
    from rsi.train.fit import fit, sample_loss

    s = TrainSettings(steps=30, batch_size=1, learning_rate=0.2)
    x = _sample([1])
    lp = torch.tensor([-0.2], requires_grad=True)
    ref = torch.tensor([-1.0])
    plain, kl0 = sample_loss(lp, ref, x, sft=True, pg=False, s=s, kl_coef=0.0)
    with_kl, kl = sample_loss(lp, ref, x, sft=True, pg=False, s=s, kl_coef=0.5)
    assert kl0 == 0.0 and kl > 0 and float(with_kl.detach()) == pytest.approx(float(plain.detach()) + 0.5 * kl)
    same, kl_same = sample_loss(ref.clone().requires_grad_(), ref, x, sft=True, pg=False, s=s, kl_coef=0.5)
    assert kl_same == 0.0  # at the parent the KL term is zero

    finals = {}
    for coef in (0.0, 5.0):
        m = Bigram()
        res = fit(m, m.logps, sft=[x], pg=[], validation=[], s=s, kl_coef=coef, evaluate=[x])
        finals[coef] = res.logprob_after
        assert res.steps == 30 and (max(res.kl_curve) > 0) == (coef > 0)
    # without KL the accepted token's probability runs towards 1; the KL to the parent holds it back
    assert finals[0.0] > -0.1 and finals[5.0] < finals[0.0] - 0.2


def test_training_stops_when_the_validation_curve_falls_and_keeps_the_best_weights() -> None:
    torch = pytest.importorskip("torch")
    from rsi.train.fit import fit

    s = TrainSettings(steps=20, batch_size=1, learning_rate=0.5, validation_every=1, validation_patience=2,
                      validation_tolerance=0.0)
    train = _sample([1])
    falls = _sample([2], validation=True, template="fam/held")  # raising token 1 after 0 lowers token 2
    m = Bigram()
    res = fit(m, m.logps, sft=[train], pg=[], validation=[falls], s=s, kl_coef=0.0, evaluate=[train])
    v = res.validation
    assert res.steps == 2 and v["stopped_at"] == 2 and v["best_step"] == 0 and v["restored_step"] == 0
    assert [p for p, _ in v["curve"]] == [0, 1, 2] and v["curve"][1][1] < v["curve"][0][1]
    assert torch.equal(m.table.detach(), torch.zeros(4, 4))  # the best measurement was the parent itself
    # a validation curve that rises never stops training
    rises = _sample([1], validation=True, template="fam/held")
    m = Bigram()
    res = fit(m, m.logps, sft=[train], pg=[], validation=[rises], s=s, kl_coef=0.0, evaluate=[train])
    assert res.steps == 20 and res.validation["stopped_at"] is None and res.validation["restored_step"] is None
    assert json.dumps(res.validation)  # recorded as JSON in the training run


def test_init_base_trains_a_fresh_lora_on_the_union_of_the_lineage(ctx: WorkspaceContext,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`--init base`: every accepted sample of the lineage, from every source, beyond the replay cap, and no
    parent adapter to start from; `--init parent` (the default) keeps the cap and the harness's own samples."""
    names = templates(6, validation=False)
    old = [f"old{i}" for i in range(6)]
    monkeypatch.setattr("rsi.loop.update.phase.task_templates",
                        lambda _ctx: {**{f"digest-{t}": names[i] for i, t in enumerate(old)}, "digest-new": names[0]})
    monkeypatch.setattr("rsi.loop.update.replay.task_templates", lambda _ctx: {})
    add_trials(ctx, [T(t, 0, 1.0, reply=f"```bash\necho {t} > /app/{t}\n```\n") for t in old[:4]]
               + [T(t, 0, 1.0, agent="oracle-replay", source="oracle", reply=f"```bash\nprintf {t} > /app/x\n```\n")
                  for t in old[4:]], job_id="job-g0")
    _child_generation(ctx)
    add_trials(ctx, [T("new", 0, 1.0, generation="gen-0001", reply="```bash\ncp a b\n```\n"),
                     T("new", 1, 0.0, generation="gen-0001", reply="```bash\nmv a b\n```\n")], job_id="job-g1")
    path = ctx.ws.root / "contracts" / "hcp-1.0.yaml"
    data = yaml.safe_load(path.read_text())
    data["training"]["replay_cap"] = 2
    path.write_text(yaml.safe_dump(data))

    seen: list[object] = []
    from rsi.train.backends import ExportBackend

    real = ExportBackend.train

    def spy(self: ExportBackend, req: object) -> object:
        seen.append(req)
        return real(self, req)  # type: ignore[arg-type]

    monkeypatch.setattr(ExportBackend, "train", spy)
    parent = run_update(UpdateRequest(gen="gen-0001", backend="export"), ctx.ws.root)
    assert parent.replay["used"] == 2  # the cap, own rollouts only
    union = run_update(UpdateRequest(gen="gen-0001", backend="export", init="base"), ctx.ws.root)
    replayed = [ln for ln in read_dataset(Path(union.dataset["path"])) if ln.provenance.get("replay")]
    assert {ln.provenance["task"] for ln in replayed} == set(old)  # all six, the oracle replays among them
    assert union.replay["cap"] == "union"
    assert seen[-1].parent_adapter is None  # type: ignore[attr-defined]
    run = ctx.store.get_training_run(union.run_id)
    assert run.params["settings"]["init"] == "base"
    with pytest.raises(InputError, match="--init"):
        run_update(UpdateRequest(gen="gen-0001", backend="export", init="scratch"), ctx.ws.root)


def test_the_before_after_logprob_is_measured_on_a_bounded_spread_of_templates() -> None:
    """The diagnostic mean log-prob reads at most `eval_max_samples` accepted completions, every template before a
    second of any: on the demo's ~680 turns measuring all of them twice was a tenth of the update."""
    from rsi.train.fit import pick_validation

    xs = [_sample([1], template=f"fam/t{i % 5}") for i in range(40)]
    got = pick_validation(xs, TrainSettings(eval_max_samples=7).eval_max_samples)
    assert len(got) == 7 and len({x.template for x in got[:5]}) == 5
    assert pick_validation(xs[:3], 64) == xs[:3]  # fewer than the cap: every one, in order
    with pytest.raises(ValueError):
        TrainSettings(eval_max_samples=0)


def test_the_pg_ratio_is_taken_against_the_trainers_own_scoring_unless_served_is_asked() -> None:
    """A rollout served by another engine (llama.cpp's quantized log-probs are ~0.4 nats off on some tokens) would
    start the clipped ratio away from 1 and clip the gradient away; re-scored in the trainer it starts at 1."""
    torch = pytest.importorskip("torch")
    from rsi.train.fit import fit, sample_loss

    s = TrainSettings(steps=1, batch_size=1, learning_rate=0.5)
    x = _sample([1], old_logprobs=[-1.386 - 0.5], advantage=1.0)  # served 0.5 nats below the trainer's -ln 4
    lp = torch.tensor([-1.386], requires_grad=True)
    served, _ = sample_loss(lp, None, x, sft=False, pg=True, s=s, kl_coef=0.0)
    served.backward()
    assert lp.grad is not None and float(lp.grad) == 0.0  # ratio e^0.5 > 1 + clip: no gradient at all
    lp.grad = None
    trainer, _ = sample_loss(lp, None, x, sft=False, pg=True, s=s, kl_coef=0.0, old=lp.detach())
    trainer.backward()
    assert float(lp.grad) == pytest.approx(-1.0)  # ratio 1: the plain policy gradient

    moved = {}
    for mode in ("trainer", "served"):
        m = Bigram()
        settings = TrainSettings(steps=1, batch_size=1, learning_rate=0.5, pg_old_logprobs=mode)
        res = fit(m, m.logps, sft=[], pg=[x], validation=[], s=settings, kl_coef=0.0, evaluate=[x])
        moved[mode] = res.logprob_after - res.logprob_before
    assert moved["trainer"] > 0.05 and moved["served"] == pytest.approx(0.0, abs=1e-6)
