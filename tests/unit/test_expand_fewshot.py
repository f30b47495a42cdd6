"""`rsi expand`'s few-shot candidates on FakeSandboxProvider and the deterministic policy server
(benchmarks/policy_server.py): drawn from the generation's own passing train trajectories only (never a
holdout or suite task's), diverse across templates, rendered in the config's action format, stored by
digest with origin `fewshot`, reproducible, and left out of the comparison on their own demonstration tasks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.policy_server import CONFIG, Policy, rule_for, serve
from rsi.cli.app import app
from rsi.core.errors import InputError
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.fewshot import demo_tasks, fewshot_candidates, load_demos
from rsi.loop.expand.phase import ExpandRequest, expand, pool_tasks
from rsi.loop.init import init_workspace
from rsi.loop.run import RunRequest, run_job
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.files import load_tasks
from tests.taskgen import make_task

# name -> (template, split); the policy solves every easy-* task under any config
TASKS: dict[str, tuple[str | None, str]] = {
    "easy-a": ("text/lines", "train"), "easy-b": ("text/lines", "train"), "easy-c": ("files/copy", "train"),
    "easy-d": (None, "train"), "cold": ("data/sum", "train"), "never": ("data/max", "train"),
    "shy": ("data/min", "train"),  # solved only without the config's EXAMPLE few-shot: a few-shot candidate fixes it
}
HOLDOUT = "easy-h"
SUITE = "easy-s"


def _toml(name: str, template: str | None, split: str) -> str:
    family = template.split("/")[0] if template else "logs"
    tpl = f'template = "{template}"\n' if template else ""
    return (f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[metadata.rsi]\nfamily = "{family}"\n{tpl}'
            f'difficulty = 1\nsplit = "{split}"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n'
            '[environment]\nbuild_timeout_sec = 300\ncpus = 1\nmemory_mb = 512\npids = 128\nnetwork_mode = "none"\n')


def _fast(env: TrialEnv) -> None:
    env.retry_wait_initial = 0.01


@pytest.fixture
def policy() -> Iterator[tuple[Policy, str]]:
    rules: dict[str, Any] = {n: {} for n in (*TASKS, HOLDOUT, SUITE)}
    rules.update({"cold": rule_for({"temperature": 0.2}), "never": None, "shy": rule_for({"few_shot": False})})
    p = Policy(rules=rules)
    with serve(p) as url:
        yield p, url


@pytest.fixture
def ctx(tmp_path: Path, policy: tuple[Policy, str]) -> Iterator[WorkspaceContext]:
    root = tmp_path / "ws"
    (root / "harness_configs").mkdir(parents=True)
    cfg = CONFIG.format(endpoint=policy[1])
    cfg = cfg[: cfg.index("search_space:")] + "search_space:\n  sampling.temperature: [0.2]\n"
    (root / "harness_configs" / "default.yaml").write_text(cfg)
    init_workspace(root, starter_tasks=False)
    for name, (tpl, split) in TASKS.items():
        make_task(root / "tasks", name, toml=_toml(name, tpl, split))
    make_task(root / "tasks", HOLDOUT, toml=_toml(HOLDOUT, "text/sort", "holdout"))
    make_task(root / "suites" / "starter", SUITE, toml=_toml(SUITE, "suite/copy", "train"))
    c = WorkspaceContext.open(root)
    yield c
    c.store.close()


def _req(provider: FakeSandboxProvider, **kw: object) -> ExpandRequest:
    base: dict[str, object] = {"budget": 60, "attempts": 1, "concurrency": 2, "proposals": 0, "provider": provider,
                               "trial_env_hook": _fast, "fewshot": 2, "explore": 1}
    return ExpandRequest(**{**base, **kw})  # type: ignore[arg-type]


def _others(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> set[str]:
    """Passing harness trials of the holdout task and the suite task, under gen-0000's own config."""
    paths = [ctx.ws.tasks_dir / HOLDOUT, ctx.ws.root / "suites" / "starter" / SUITE]
    out = run_job(ctx, RunRequest(paths=paths, agent="harness", attempts=1, concurrency=2), provider=provider,
                  trial_env_hook=_fast)
    assert {t.task_name for t in out.trials if t.passed} == {HOLDOUT, SUITE}
    return {t.id for t in out.trials}


def test_fewshot_candidates_come_from_passing_train_trajectories_only(ctx: WorkspaceContext,
                                                                      provider: FakeSandboxProvider) -> None:
    assert ctx.contract.promotion.suites == ["suites/starter"]
    forbidden = _others(ctx, provider)
    out = expand(ctx, _req(provider))
    assert not out.interrupted or out.complete, out.reason
    base = ctx.generation("gen-0000").harness_config.digest
    rows = [r for r in ctx.store.search_candidates(out.job_id) if r.origin == "fewshot"]
    assert [r.label for r in rows] == ["fewshot:k=2:draw=1", "fewshot:k=2:draw=2"]
    trials = {t.id: t for t in ctx.store.outcomes("expand", generation="gen-0000", agent="harness")}
    for r in rows:
        assert r.config_digest and r.parent_digest == base and r.state != "refused"
        assert ctx.store.get_config(r.config_digest).origin == "fewshot"
        ids = (r.source_trial or "").split(",")
        assert len(ids) == 2 and not set(ids) & forbidden
        demos = [trials[i] for i in ids]
        assert all(t.passed and t.split == "train" and t.harness_config_digest == base for t in demos)
        assert {t.task_name for t in demos} <= {"easy-a", "easy-b", "easy-c", "easy-d"}
        templates = {TASKS[t.task_name][0] or "logs" for t in demos}
        assert len(templates) == 2, "two demonstrations from one template while others were there"
        cfg = ctx.config_by_digest(r.config_digest)
        shots = [(s.role, s.content) for s in cfg.prompt.few_shot]
        assert len(shots) == 8 and shots[0][0] == "user" and shots[0][1].startswith("Task easy-")
        assert shots[1] == ("assistant", '```bash\necho ok > "${SANDBOX_ROOT:-}/app/out.txt"\n```')
        assert shots[2][0] == "user" and "[exit code 0]" in shots[2][1] and shots[3] == ("assistant",
                                                                                       "{{ finish_word }}")
        assert cfg.sampling == ctx.config_by_digest(base).sampling  # only the few-shot block differs
    # the few-shot candidates were searched and fixed `shy` (the policy reads the task from the last
    # instruction, after the demonstrations of other tasks)
    ran = [t for t in trials.values() if t.variant in {r.label for r in rows}]
    assert any(t.passed and t.task_name == "shy" for t in ran) and "shy" in out.coverage["covered"]
    # the demonstrations' own tasks are left out of each candidate's comparison with the baseline
    held = demo_tasks(ctx, out.job_id, {i: t.task_name for i, t in trials.items()})
    assert all(held[r.label] == {trials[i].task_name for i in (r.source_trial or "").split(",")} for r in rows)
    # a holdout or suite task handed to the loader directly still gives no demonstration
    everything = [*pool_tasks(ctx, None), *load_tasks([ctx.ws.tasks_dir / HOLDOUT,
                                                        ctx.ws.root / "suites" / "starter" / SUITE])]
    cfg0 = ctx.config_by_digest(base)
    assert {d.task for d in load_demos(ctx, "gen-0000", everything, base, cfg0)} == {"easy-a", "easy-b", "easy-c",
                                                                                       "easy-d"}


def test_the_same_evidence_and_seed_draw_the_same_candidates(ctx: WorkspaceContext,
                                                             provider: FakeSandboxProvider) -> None:
    first = expand(ctx, _req(provider, budget=30))
    digests = [r.config_digest for r in ctx.store.search_candidates(first.job_id) if r.origin == "fewshot"]
    assert len(digests) == 2
    base = ctx.generation("gen-0000").harness_config.digest
    cfg = ctx.config_by_digest(base)
    tasks = pool_tasks(ctx, None)
    # another job with the same seed draws the same demonstrations (same digests); another seed need not
    assert fewshot_candidates(ctx, "exp-again", "gen-0000", cfg, base, tasks, 2, 0) == 2
    assert [r.config_digest for r in ctx.store.search_candidates("exp-again")] == digests
    fewshot_candidates(ctx, "exp-other", "gen-0000", cfg, base, tasks, 2, 5)
    assert [r.config_digest for r in ctx.store.search_candidates("exp-other")] != digests
    # asked again for a job that has them, nothing new is drawn (a resume searches the same ones)
    assert fewshot_candidates(ctx, "exp-again", "gen-0000", cfg, base, tasks, 3, 9) == 2
    assert [r.config_digest for r in ctx.store.search_candidates("exp-again")] == digests


def test_no_fewshot_and_no_passing_trajectory_mean_no_fewshot_candidate(ctx: WorkspaceContext,
                                                                        provider: FakeSandboxProvider) -> None:
    off = expand(ctx, _req(provider, fewshot=0, budget=30))
    assert not [r for r in ctx.store.search_candidates(off.job_id) if r.origin == "fewshot"]
    assert ctx.store.get_job(off.job_id).params["fewshot"] == 0
    none = expand(ctx, _req(provider, tasks="never", budget=20))  # nothing passes it under any config
    assert not [r for r in ctx.store.search_candidates(none.job_id) if r.origin == "fewshot"]
    with pytest.raises(InputError, match="--fewshot"):
        expand(ctx, _req(provider, fewshot=-1))


def test_the_cli_takes_fewshot_and_no_fewshot(ctx: WorkspaceContext) -> None:
    r = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "expand", "--fewshot", "-1", "--budget", "30"])
    assert r.exit_code == 2 and "--fewshot" in r.output
    r = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "expand", "--help"])
    assert "--fewshot" in r.output and "no few-shot" in r.output
    assert "--no-fewshot" not in r.output  # deprecated: still taken, with one line saying `--fewshot 0`
    r = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "expand", "--no-fewshot", "--hints", "x"])
    assert r.exit_code == 2 and "--hints" in r.stderr and "deprecated: --no-fewshot is now --fewshot 0" in r.stderr


def test_fewshot_is_bootstrapped_from_a_pass_the_search_found(ctx: WorkspaceContext,
                                                              provider: FakeSandboxProvider) -> None:
    """The baseline passes neither `cold` nor `shy`; the temperature candidate solves `cold` in the search; the
    next round draws a few-shot candidate from that pass (DSPy's bootstrap), and it fixes `shy`, which no
    other candidate could."""
    out = expand(ctx, _req(provider, tasks="[cs]*", budget=40))
    base = ctx.generation("gen-0000").harness_config.digest
    cands = {r.label: r for r in ctx.store.search_candidates(out.job_id)}
    shots = [r for r in cands.values() if r.origin == "fewshot"]
    assert [r.label for r in shots] == ["fewshot:k=1:draw=1"]
    trials = {t.id: t for t in ctx.store.outcomes("expand", generation="gen-0000", agent="harness")}
    (demo,) = [trials[i] for i in (shots[0].source_trial or "").split(",")]
    temp = next(r for r in cands.values() if r.origin != "fewshot")
    assert demo.task_name == "cold" and demo.passed and demo.harness_config_digest == temp.config_digest != base
    assert not any(t.passed for t in trials.values() if t.variant == "baseline")
    fixed = [t for t in trials.values() if t.variant == shots[0].label and t.passed]
    assert {t.task_name for t in fixed} == {"shy"} and set(out.coverage["covered"]) == {"cold", "shy"}
    # a resume reads the same candidate back rather than drawing again
    again = expand(ctx, _req(provider, resume=out.job_id, budget=50))
    assert [r.label for r in ctx.store.search_candidates(again.job_id) if r.origin == "fewshot"] == [shots[0].label]
