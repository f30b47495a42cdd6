"""`rsi update` without a model: selection rules, advantages, quota, dedupe, the dataset and its exporters,
the train/serve mismatch refusal, and the export and command backends (a failing or broken adapter
leaves no candidate)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rsi.core.contract import Contract
from rsi.core.errors import ConfigError
from rsi.core.training import TrialRecord, group_advantages, select
from rsi.loop.context import WorkspaceContext
from rsi.loop.update.phase import UpdateFailed, UpdateRequest, run_update
from rsi.train.dataset import DatasetLine, openai_line, trl_line
from rsi.train.peft_dir import AdapterCheckError, check_peft_dir
from tests.updatekit import T, add_trials, workspace

CONTRACT = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {"bash": {"description": "b"}}}})


def rec(tid: str, task: str = "a", reward: float | None = 1.0, **kw: object) -> TrialRecord:
    base: dict[str, object] = dict(trial_id=tid, task_digest=f"d-{task}", task_name=task, generation="gen-0000",
                                   config_digest="c", attempt=int(tid.split("-")[-1]) if "-" in tid else 0,
                                   split="train", reward=reward, error_type=None, integrity="snapshot",
                                   tampered=False, turns=2, max_turns=6, actions=(f"reply {tid}",))
    base.update(kw)
    return TrialRecord(**base)  # type: ignore[arg-type]


def test_selection_rules_exclude_and_reject_with_reasons() -> None:
    sel = select([
        rec("ok-0"),
        rec("low-1", reward=0.0),
        rec("infra-2", error_type="sandbox_error"),
        rec("tamper-3", tampered=True),
        rec("shared-4", integrity="shared"),
        rec("hold-5", split="holdout"),
        rec("timeout-6", error_type="agent_timeout"),
        rec("long-7", turns=9),
    ], CONTRACT)
    assert sel.accepted == ["ok-0"]
    assert {k: v.split(":")[0] for k, v in sel.excluded.items()} == {
        "infra-2": "infra", "tamper-3": "tamper", "shared-4": "integrity", "hold-5": "holdout"}
    assert {k: v.split(":")[0] for k, v in sel.not_accepted.items()} == {
        "low-1": "low_reward", "timeout-6": "unclean_exit", "long-7": "over_limits"}
    # a failed but clean rollout still belongs to its group: it carries the policy-gradient signal
    assert set(sel.groups[sel.group_of["ok-0"]]) == {"ok-0", "low-1", "timeout-6", "long-7"}


def test_group_advantages_and_groups_without_signal() -> None:
    assert group_advantages([1, 0, 0, 1], normalize_std=False) == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([1, 0, 0, 1], normalize_std=True) == [1.0, -1.0, -1.0, 1.0]
    assert group_advantages([1, 1, 1], normalize_std=True) == [0.0, 0.0, 0.0]
    sel = select([rec("a-0", "a", 1.0), rec("a-1", "a", 0.0), rec("b-0", "b", 1.0), rec("b-1", "b", 1.0),
                  rec("c-0", "c", 0.0)], CONTRACT)
    c = sel.counts()
    assert (c["groups"], c["groups_with_signal"], c["groups_without_signal"]) == (3, 1, 2)
    assert sel.advantages == {"a-0": 0.5, "a-1": -0.5, "b-0": 0.0, "b-1": 0.0, "c-0": 0.0}
    # other generations or configs make other groups
    sel2 = select([rec("a-0", config_digest="x"), rec("a-1", config_digest="y", reward=0.0)], CONTRACT)
    assert len(sel2.groups) == 2 and not sel2.groups_with_signal


def test_quota_keeps_best_then_earliest_and_dedupe_drops_near_duplicates() -> None:
    six = [rec(f"a-{i}", reward=1.0, actions=(f"distinct command number {i} " + "x" * i * 7,)) for i in range(6)]
    sel = select(six, CONTRACT)
    assert sel.accepted == ["a-0", "a-1", "a-2", "a-3"]  # per_task_quota 4
    assert sel.not_accepted["a-4"].startswith("quota") and sel.not_accepted["a-5"].startswith("quota")
    dup = [rec("a-0", actions=("```bash\nls  -la\n```",)), rec("a-1", actions=("```bash\nls -la\n```",)),
           rec("a-2", actions=("```bash\ncat /etc/hostname\n```",))]
    sel = select(dup, CONTRACT)
    assert sel.accepted == ["a-0", "a-2"]
    assert sel.not_accepted["a-1"] == "near_duplicate: of a-0"


def _tool_line() -> DatasetLine:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1_0", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
            {"role": "tool", "tool_call_id": "call_1_0", "content": "a.txt"},
            {"role": "assistant", "content": "done"}]
    params = {"type": "object", "properties": {"cmd": {"type": "string"}}}
    tools = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": params}}]
    return DatasetLine(messages=msgs, tools=tools, reward=1.0, accepted=True, group_id="g", sample_index=0,
                       advantage=0.5, prompt_messages=2, provenance={})


# OpenAI's chat fine-tuning line (platform docs, "Preparing your dataset" / function calling).
OPENAI_SCHEMA = {
    "type": "object", "required": ["messages"], "additionalProperties": False,
    "properties": {
        "messages": {"type": "array", "minItems": 1, "items": {"oneOf": [
            {"type": "object", "additionalProperties": False, "required": ["role", "content"],
             "properties": {"role": {"enum": ["system", "user"]}, "content": {"type": "string"}}},
            {"type": "object", "additionalProperties": False, "required": ["role"],
             "properties": {"role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
                            "weight": {"enum": [0, 1]},
                            "tool_calls": {"type": "array", "items": {
                                "type": "object", "required": ["id", "type", "function"],
                                "properties": {"id": {"type": "string"}, "type": {"const": "function"},
                                               "function": {"type": "object", "required": ["name", "arguments"],
                                                            "properties": {"name": {"type": "string"},
                                                                           "arguments": {"type": "string"}}}}}}}},
            {"type": "object", "additionalProperties": False, "required": ["role", "content", "tool_call_id"],
             "properties": {"role": {"const": "tool"}, "content": {"type": "string"},
                            "tool_call_id": {"type": "string"}}},
        ]}},
        "tools": {"type": "array", "items": {"type": "object", "required": ["type", "function"]}},
    },
}
# TRL's conversational dataset with tools: messages with role/content, tool calls' arguments as dicts.
TRL_SCHEMA = {
    "type": "object", "required": ["messages", "tools"],
    "properties": {
        "messages": {"type": "array", "items": {
            "type": "object", "required": ["role", "content"],
            "properties": {"role": {"enum": ["system", "user", "assistant", "tool"]}, "content": {"type": "string"},
                           "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
                               "function": {"type": "object", "required": ["name", "arguments"], "properties": {
                                   "name": {"type": "string"}, "arguments": {"type": "object"}}}}}}}}},
        "tools": {"type": "array"},
    },
}


def test_exporters_write_valid_openai_and_trl_lines() -> None:
    ln = _tool_line()
    o = openai_line(ln)
    jsonschema.validate(o, OPENAI_SCHEMA)
    assert [m.get("weight") for m in o["messages"] if m["role"] == "assistant"] == [1, 1]
    assert o["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"cmd": "ls"}'
    t = trl_line(ln)
    jsonschema.validate(t, TRL_SCHEMA)
    assert t["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"cmd": "ls"}
    # a few-shot assistant message in the head is never trained on
    head = DatasetLine(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "ex"},
                                 {"role": "assistant", "content": "shot"}, {"role": "user", "content": "u"},
                                 {"role": "assistant", "content": "mine"}], tools=[], reward=1, accepted=True,
                       group_id="g", sample_index=0, advantage=0, prompt_messages=4, provenance={})
    assert [m.get("weight") for m in openai_line(head)["messages"]] == [None, None, 0, None, 1]
    jsonschema.validate(openai_line(head), OPENAI_SCHEMA)


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceContext]:
    monkeypatch.setenv("RSI_MODEL_PORT", "9")  # nothing answers: no endpoint to load into
    c = workspace(tmp_path)
    yield c
    c.store.close()


def _trials(ctx: WorkspaceContext) -> None:
    add_trials(ctx, [T("alpha", 0, 1.0), T("alpha", 1, 0.0, reply="```bash\nls\n```\n"),
                     T("beta", 0, 1.0, reply="```bash\ncat x\n```\n"), T("beta", 1, 1.0, reply="```bash\ncat x\n```\n"),
                     T("gamma", 0, 0.0), T("hold", 0, 1.0, split="holdout"),
                     T("delta", 0, 1.0, error_type="sandbox_error")])


def test_export_backend_writes_dataset_manifest_and_no_candidate(ctx: WorkspaceContext) -> None:
    _trials(ctx)
    out = run_update(UpdateRequest(backend="export"), ctx.ws.root)
    ds = Path(out.dataset["path"])
    assert hashlib.sha256(ds.read_bytes()).hexdigest() == out.dataset["digest"]
    lines = [json.loads(x) for x in ds.read_text().splitlines()]
    assert {ln["provenance"]["task"] for ln in lines} == {"alpha", "beta", "gamma"}  # holdout sealed, infra out
    assert sum(ln["accepted"] for ln in lines) == 2  # alpha-0, beta-0 (beta-1 is a near-duplicate)
    assert out.selection["groups_with_signal"] == 1
    man = json.loads((ds.parent / "manifest.json").read_text())
    assert man["digest"] == out.dataset["digest"] and man["counts"]["accepted"] == 2
    for name in ("openai_finetune.jsonl", "trl_sft.jsonl"):
        for x in (ds.parent / name).read_text().splitlines():
            jsonschema.validate(json.loads(x), OPENAI_SCHEMA if name.startswith("openai") else TRL_SCHEMA)
    assert out.candidate is None
    assert [g.id for g in ctx.store.list_generations()] == ["gen-0000"]
    run = ctx.store.get_training_run(out.run_id)
    assert run.status == "done" and run.dataset_digest == out.dataset["digest"]


def test_mismatched_config_is_refused_with_the_reason(ctx: WorkspaceContext) -> None:
    base = ctx.harness_config_for(ctx.generation())
    other = base.model_copy(update={"sampling": base.sampling.model_copy(update={"temperature": 0.1})})
    d = ctx.register_config(other)
    add_trials(ctx, [T("alpha", 0, 1.0, config_digest=d), T("alpha", 1, 0.0, config_digest=d)])
    with pytest.raises(ConfigError, match=r"differ in sampling\.temperature"):
        run_update(UpdateRequest(backend="export"), ctx.ws.root)
    add_trials(ctx, [T("beta", 0, 1.0)], job_id="job-upd-2")
    out = run_update(UpdateRequest(backend="export"), ctx.ws.root)
    assert out.refused == {"mismatch": 2} and out.selection["accepted"] == 1
    # a config that differs only by name (expand's adopted copy) is the same behaviour: accepted
    renamed = base.model_copy(update={"name": "default-adopted"})
    add_trials(ctx, [T("gamma", 0, 1.0, config_digest=ctx.register_config(renamed))], job_id="job-upd-3")
    out = run_update(UpdateRequest(backend="export"), ctx.ws.root)
    sel = out.selection
    # gamma's template (the task itself: it has none) is in the validation slice: measured, not trained on
    assert (sel["accepted"], sel["validation"]["accepted"], sel["validation"]["templates"]) == (1, 1, ["task:gamma"])
    lines = [json.loads(x) for x in Path(out.dataset["path"]).read_text().splitlines()]
    assert [ln["provenance"]["task"] for ln in lines if ln.get("validation")] == ["gamma"]
    export = (Path(out.dataset["path"]).parent / "openai_finetune.jsonl").read_text().splitlines()
    assert len(export) == 1 and "gamma" not in export[0]  # nor does another trainer get it


ADAPTER_SCRIPT = r'''
import json, struct, sys
from pathlib import Path
out, base, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
out.mkdir(parents=True, exist_ok=True)
print("training on", sys.argv[4], flush=True)
if mode == "fail":
    sys.exit(3)
cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
       "base_model_name_or_path": base if mode != "wrongbase" else "gpt2"}
(out / "adapter_config.json").write_text(json.dumps(cfg))
data = bytes(4 * 8)
header = {"base_model.model.layers.0.q_proj.lora_A.weight": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]}}
h = json.dumps(header).encode()
blob = struct.pack("<Q", len(h)) + h + data
(out / "adapter_model.safetensors").write_bytes(blob[:-10] if mode == "truncated" else blob)
'''


@pytest.mark.parametrize("mode", ["ok", "fail", "wrongbase", "truncated"])
def test_command_backend_candidate_or_nothing(ctx: WorkspaceContext, tmp_path: Path, mode: str) -> None:
    _trials(ctx)
    script = tmp_path / "train.py"
    script.write_text(ADAPTER_SCRIPT)
    cmd = f"{sys.executable} {script} {{output_dir}} {{base_model}} {mode} {{dataset}}"
    logged: list[str] = []
    req = UpdateRequest(backend="command", command=cmd, log=logged.append)
    if mode != "ok":
        with pytest.raises(UpdateFailed, match="no candidate registered"):
            run_update(req, ctx.ws.root)
        assert [g.id for g in ctx.store.list_generations()] == ["gen-0000"]
        assert not (ctx.ws.generations_dir / "gen-0001.yaml").exists()
        assert not (ctx.ws.root / "adapters").exists()
        (run,) = ctx.store.training_runs()
        assert run.status == "failed" and run.candidate is None and run.error
        return
    out = run_update(req, ctx.ws.root)
    assert any("training on" in m for m in logged)  # the command's output is streamed
    assert out.candidate == "gen-0001"
    m = ctx.store.get_generation("gen-0001")
    ref = m.adapters["agent"]
    assert ref.serve_name == f"agent-g0001-{ref.sha256[:8]}"
    assert (ctx.ws.generations_dir / "gen-0001.yaml").is_file()
    assert check_peft_dir(ctx.ws.root / ref.path, "SmolLM2-135M-Instruct").sha256 == ref.sha256
    assert m.parent == "gen-0000" and m.state.value == "candidate"
    assert m.provenance.training_run == out.run_id and m.provenance.dataset_digest == out.dataset["digest"]
    assert m.provenance.training and m.provenance.training["backend"] == "command"
    assert m.metrics["adapter_bytes"] > 0 and m.metrics["train_accepted"] == 2
    run = ctx.store.get_training_run(out.run_id)
    assert (run.status, run.candidate, run.serve_name) == ("done", "gen-0001", ref.serve_name)
    assert out.loaded["loaded"] is False  # no server answers in this test


def test_peft_dir_check_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(AdapterCheckError, match="no adapter_config.json"):
        check_peft_dir(tmp_path, "m")


class CharTok:
    """A tokenizer stand-in: ChatML text, one id per character."""

    def apply_chat_template(self, msgs: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}

    def convert_tokens_to_ids(self, tok: str) -> int:
        return 0


def test_trainer_uses_the_served_tokens_and_refuses_a_turn_whose_rendering_differs() -> None:
    pytest.importorskip("torch")
    from rsi.train.local import build_samples, render_prompt

    tok = CharTok()
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a1"}, {"role": "user", "content": "o"},
            {"role": "assistant", "content": "DONE"}]
    served = [{"prompt_token_ids": render_prompt(tok, msgs[:2]), "completion_token_ids": [7, 8],
               "logprobs": [-1.0, -2.0]},
              {"prompt_token_ids": render_prompt(tok, msgs[:4]), "completion_token_ids": [9], "logprobs": [-0.5]}]
    line = DatasetLine(messages=msgs, tools=[], reward=1.0, accepted=True, group_id="g", sample_index=0,
                       advantage=0.5, prompt_messages=2, provenance={"trial_id": "t"}, tokens=served)
    samples, stats = build_samples([line], tok, 10_000)
    assert [s.completion for s in samples] == [[7, 8], [9]]  # the sampled ids, not a re-tokenization
    assert samples[0].old_logprobs == [-1.0, -2.0]
    assert (stats["token_checked"], stats["token_equal"], stats["token_mismatch"]) == (2, 2, 0)
    bad = [dict(served[0], prompt_token_ids=[1, 2, 3]), served[1]]
    samples, stats = build_samples([DatasetLine(**{**line.__dict__, "tokens": bad})], tok, 10_000)
    assert stats["token_mismatch"] == 1 and len(samples) == 1
    # without the server's ids a text turn is rendered: prompt by the template, completion + <|im_end|>
    samples, stats = build_samples([DatasetLine(**{**line.__dict__, "tokens": None})], tok, 10_000)
    assert samples[0].completion == [ord("a"), ord("1"), 0] and stats["token_checked"] == 0
    assert build_samples([line], tok, 5)[1]["too_long"] == 2


def _lora_dir(d: Path, cfg_extra: dict[str, object]) -> Path:
    import json as _json
    import struct as _struct

    d.mkdir(parents=True)
    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "base_model_name_or_path": "m",
           **cfg_extra}
    (d / "adapter_config.json").write_text(_json.dumps(cfg))
    header = {"a.lora_A.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
              "a.lora_B.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]},
              "e.lora_embedding_B": {"dtype": "F32", "shape": [2, 2], "data_offsets": [32, 48]}}
    h = _json.dumps(header).encode()
    (d / "adapter_model.safetensors").write_bytes(_struct.pack("<Q", len(h)) + h + bytes(range(1, 49)))
    return d


def test_identity_adapter_zeroes_every_b_and_refuses_dora(tmp_path: Path) -> None:
    from rsi.train.peft_dir import write_identity_adapter

    src = _lora_dir(tmp_path / "src", {})
    info = write_identity_adapter(src, tmp_path / "ident", "m")
    data = (info.path / "adapter_model.safetensors").read_bytes()
    assert data[-32:] == bytes(32) and data[-48:-32] == bytes(range(1, 17))  # A kept, both Bs zeroed
    with pytest.raises(AdapterCheckError, match="DoRA"):
        write_identity_adapter(_lora_dir(tmp_path / "dora", {"use_dora": True}), tmp_path / "x", "m")
