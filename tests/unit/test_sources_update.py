"""Training data by source (issue 36 items 3 and 5): `self` keeps the group-advantage path, `hinted` and `oracle`
are SFT only and come after the model's own where caps bind; the dataset counts samples per source; a dataset that
would train on the sealed side is refused by provenance, naming the samples, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi.core.contract import Contract
from rsi.core.leakage import SampleFacts, SealedFacts, command_ngrams, find_leaks, overlap
from rsi.core.training import TrialRecord, select
from rsi.loop.context import WorkspaceContext
from rsi.loop.update.leakage import LeakageRefused
from rsi.loop.update.phase import UpdateRequest, run_update
from rsi.store.files import load_task
from tests.taskgen import make_task
from tests.updatekit import T, add_trials, workspace

CONTRACT = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {"bash": {"description": "b"}}}})


def rec(tid: str, source: str = "self", reward: float = 1.0, task: str = "a", **kw: object) -> TrialRecord:
    base: dict[str, object] = dict(trial_id=tid, task_digest=f"d-{task}", task_name=task, generation="gen-0000",
                                   config_digest="c", attempt=int(tid.rsplit("-", 1)[-1]), split="train",
                                   reward=reward, error_type=None, integrity="snapshot", tampered=False, turns=2,
                                   max_turns=6, actions=(tid * 12,),
                                   source=source)
    base.update(kw)
    return TrialRecord(**base)  # type: ignore[arg-type]


def test_only_the_models_own_rollouts_carry_an_advantage() -> None:
    sel = select([rec("s-0"), rec("s-1", reward=0.0), rec("o-2", "oracle"), rec("h-3", "hinted:2"),
                  rec("h-4", "hinted:2", reward=0.0)], CONTRACT)
    assert sel.advantages["s-0"] == 0.5 and sel.advantages["s-1"] == -0.5
    assert sel.advantages["o-2"] == sel.advantages["h-3"] == sel.advantages["h-4"] == 0.0
    assert sel.group_of["o-2"] != sel.group_of["s-0"] != sel.group_of["h-3"], "another source is its own group"
    assert list(sel.groups) == [sel.group_of["s-0"]], "only the model's own groups feed the policy gradient"
    assert set(sel.accepted) == {"s-0", "o-2", "h-3"}


def test_where_the_quota_binds_the_models_own_come_first_then_hinted_then_replays() -> None:
    records = [rec("o-0", "oracle"), rec("h-1", "hinted:3"), rec("h-2", "hinted:1"), rec("s-3"), rec("s-4"),
               rec("o-5", "oracle")]
    sel = select(records, CONTRACT)  # per_task_quota 4
    assert sel.accepted == ["s-3", "s-4", "h-2", "h-1"]
    assert sel.not_accepted["o-0"].startswith("quota") and sel.not_accepted["o-5"].startswith("quota")


def test_a_source_the_contract_leaves_out_is_excluded_with_the_reason() -> None:
    contract = CONTRACT.model_copy(update={"training": CONTRACT.training.model_copy(update={"sources": ["self"]})})
    sel = select([rec("s-0"), rec("o-1", "oracle")], contract)
    assert sel.accepted == ["s-0"] and sel.excluded["o-1"].startswith("source:")


# -- leakage (pure) -------------------------------------------------------------------------------

def _facts(sid: str, **kw: object) -> SampleFacts:
    base: dict[str, object] = dict(sample_id=sid, task_digest=f"d-{sid}", template="text/count", phrasing=0,
                                   phrasings=4, actions=("```bash\nwc -l < /app/a.txt > /app/b.txt\n```",))
    base.update(kw)
    return SampleFacts(**base)  # type: ignore[arg-type]


def test_each_leak_rule_names_the_sample() -> None:
    sealed = SealedFacts(sealed_digests=frozenset({"d-sealed"}), unseen_templates=frozenset({"logs/errors"}),
                         holdout_phrasings=frozenset({("text/count", 2)}), holdout_phrasing_count=1,
                         unseen_references={"hold-1": ("grep -c ERROR /app/app.log > /app/n.txt",)})
    report = find_leaks([
        _facts("ok"),
        _facts("sealed", task_digest="d-sealed"),
        _facts("unseen", template="logs/errors"),
        _facts("phrasing", phrasing=2),
        _facts("last-phrasing", phrasing=3),
        _facts("copied", actions=("```bash\ngrep -c ERROR /app/app.log > /app/n.txt\n```",)),
    ], sealed)
    assert {(x.sample_id, x.rule) for x in report.leaks} == {
        ("sealed", "sealed_task"), ("unseen", "unseen_template"), ("phrasing", "holdout_phrasing"),
        ("last-phrasing", "holdout_phrasing"), ("copied", "reference_overlap")}
    assert report.max_overlap == 1.0 and report.max_overlap_with == "copied ~ hold-1"


def test_a_reference_too_short_to_attribute_is_counted_and_not_used() -> None:
    sealed = SealedFacts(unseen_references={"tiny": ("echo ok > /app/out.txt",)})
    report = find_leaks([_facts("same", actions=("```bash\necho ok > /app/out.txt\n```",))], sealed)
    assert report.ok and report.short_references == 1 and report.references == 0


def test_the_same_operation_on_other_names_is_not_a_reference_overlap() -> None:
    ref = command_ngrams(["grep -c ERROR /app/app.log > /app/n.txt"])
    mine = command_ngrams(["```bash\ngrep -c WARN /app/server.log > /app/count.txt\n```"])
    assert overlap(mine, ref) < 0.5


# -- update end to end (fake trials, real workspace files) ---------------------------------------

def _task(ctx: WorkspaceContext, name: str, *, template: str, split: str = "train", part: str | None = None,
          phrasing: int = 0, solve: str = "echo ok > /app/out.txt\n") -> str:
    toml = (f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[metadata.rsi]\nfamily = "{template.split("/")[0]}"\n'
            f'template = "{template}"\nsplit = "{split}"\nphrasing = {phrasing}\nphrasings = 4\n'
            + (f'holdout_part = "{part}"\n' if part else "")
            + '\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n[environment]\ncpus = 1\n')
    d = make_task(ctx.ws.tasks_dir, name, toml=toml, solve=solve)
    return load_task(d).digest


@pytest.fixture
def ctx(tmp_path: Path) -> WorkspaceContext:
    c = workspace(tmp_path)
    yield c  # type: ignore[misc]
    c.store.close()


def test_update_counts_samples_per_source_and_trains_replays_without_tokens(ctx: WorkspaceContext) -> None:
    d_a = _task(ctx, "a", template="text/count")
    d_b = _task(ctx, "b", template="files/move")  # neither template is in the validation slice (in_validation)
    add_trials(ctx, [T("a", 1, 0.0, task_digest=d_a), T("a", 2, 1.0, task_digest=d_a),
                     T("b", 1, 1.0, agent="oracle-replay", source="oracle", task_digest=d_b,
                       reply="```bash\ncp /app/x /app/y\n```\n",
                       tokens=[{"prompt_token_ids": [1], "completion_token_ids": [2], "logprobs": [-0.1]}] * 2)])
    out = run_update(UpdateRequest(backend="export"), ctx.ws.root)
    lines = [json.loads(x) for x in Path(out.dataset["path"]).read_text().splitlines()]
    by_src = {ln["source"]: ln for ln in lines if ln["accepted"]}
    assert set(by_src) == {"self", "oracle"}
    assert by_src["oracle"]["advantage"] == 0.0 and "tokens" not in by_src["oracle"], "SFT only, no ratio"
    assert out.selection["samples"]["by_source"] == {"oracle": 1, "self": 1}
    assert out.selection["samples"]["by_family"] == {"files": 1, "text": 1}
    assert out.selection["samples"]["by_template"] == {"files/move": 1, "text/count": 1}
    assert out.selection["leakage"]["ok"] is True


def test_a_planted_leak_is_refused_naming_the_sample_and_nothing_is_written(ctx: WorkspaceContext) -> None:
    _task(ctx, "held", template="logs/errors", split="holdout", part="unseen",
          solve="grep -c ERROR /app/app.log > /app/errors.txt\n")
    d_leak = _task(ctx, "leak", template="logs/errors")  # a train task on an unseen-template holdout template
    d_ok = _task(ctx, "fine", template="text/count")
    ids = add_trials(ctx, [T("leak", 1, 1.0, task_digest=d_leak), T("fine", 1, 1.0, task_digest=d_ok)])
    runs_before = len(list((ctx.ws.state_dir / "updates").glob("*"))) if (ctx.ws.state_dir / "updates").exists() else 0
    with pytest.raises(LeakageRefused) as err:
        run_update(UpdateRequest(backend="export"), ctx.ws.root)
    assert ids[0] in str(err.value) and "unseen_template" in str(err.value) and ids[1] not in str(err.value)
    assert err.value.exit_code == 2
    after = len(list((ctx.ws.state_dir / "updates").glob("*"))) if (ctx.ws.state_dir / "updates").exists() else 0
    assert after == runs_before and not ctx.store.list_generations()[1:], "no dataset, no run, no candidate"


def test_a_held_out_phrasing_of_a_train_template_is_refused(ctx: WorkspaceContext) -> None:
    _task(ctx, "skill", template="text/count", split="holdout", part="in_skill", phrasing=3)
    d = _task(ctx, "worded", template="text/count", phrasing=3)  # the in-skill holdout's wording on the train side
    add_trials(ctx, [T("worded", 1, 1.0, task_digest=d)])
    with pytest.raises(LeakageRefused, match="holdout_phrasing"):
        run_update(UpdateRequest(backend="export", dry_run=True), ctx.ws.root)


def test_dry_run_counts_and_checks_but_writes_nothing(ctx: WorkspaceContext) -> None:
    d = _task(ctx, "a", template="text/count")
    add_trials(ctx, [T("a", 1, 1.0, task_digest=d), T("a", 2, 1.0, agent="hinted", source="hinted:3", task_digest=d,
                                                     reply="```bash\nwc -l < in > out\n```\n")])
    out = run_update(UpdateRequest(backend="export", dry_run=True), ctx.ws.root)
    assert out.dataset["path"] is None and out.selection["samples"]["by_source"] == {"hinted:3": 1, "self": 1}
    assert not (ctx.ws.state_dir / "updates").exists() or not any((ctx.ws.state_dir / "updates").iterdir())


def test_what_a_samples_own_task_needs_is_never_counted_as_a_leak() -> None:
    """A train template and an unseen one may share plumbing (logs/per-level and pipeline/ext-counts both end in
    `| LC_ALL=C sort | uniq -c | awk ...`). A replay of the train task's own reference is its task's work, not a
    copy of the unseen answer; the same commands on a task whose reference does not hold them are still a leak."""
    tail = "LC_ALL=C sort | uniq -c | awk '{print $2\" \"$1}' > /app/counts.txt"
    sealed = SealedFacts(unseen_references={"hold-1": (f"sed 's/.*\\.//' /app/files.txt | {tail}",)})
    own = f"awk '{{print $3}}' /app/app.log | {tail}"
    reply = (f"```bash\n{own}\n```",)
    replay = _facts("replay", actions=reply, own_reference=(own,))
    stranger = _facts("stranger", actions=reply, own_reference=("cat /app/app.log > /app/counts.txt",))
    report = find_leaks([replay, stranger], sealed)
    assert {(x.sample_id, x.rule) for x in report.leaks} == {("stranger", "reference_overlap")}, report.leaks
    assert overlap(command_ngrams(reply), command_ngrams(sealed.unseen_references["hold-1"])) > 0.5
