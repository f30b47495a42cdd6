"""`rsi expand` with few-shot candidates on, as a user runs it: the CLI in a subprocess, real Docker, a real
local policy server (benchmarks/policy_server.py).

Four train tasks: `easy-a` and `easy-b` (template text/lines) and `easy-c` (files/copy) any config solves;
`shy` only a config without the shipped `EXAMPLE` few-shot message solves. A holdout task `easy-h`, which
any config solves too, has a passing trajectory on record before the expand. The few-shot candidates must
be drawn from the baseline's passing train trajectories (never easy-h's), one per template, stored with
origin `fewshot`, and the search must find that they fix `shy`, confirmed by two passes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.policy_server import CONFIG, Policy, rule_for, serve
from rsi.loop.init import init_workspace
from tests.integration.test_resume import db_rows, rsi
from tests.taskgen import make_task

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

TASKS = {"easy-a": ("text/lines", "train"), "easy-b": ("text/lines", "train"), "easy-c": ("files/copy", "train"),
         "shy": ("data/min", "train"), "easy-h": ("text/sort", "holdout")}


def _toml(name: str, template: str, split: str) -> str:
    return (f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[metadata.rsi]\nfamily = "{template.split("/")[0]}"\n'
            f'template = "{template}"\ndifficulty = 1\nsplit = "{split}"\n\n[agent]\ntimeout_sec = 60\n\n'
            '[verifier]\ntimeout_sec = 60\n\n[environment]\nbuild_timeout_sec = 300\ncpus = 1\nmemory_mb = 512\n'
            'pids = 128\nnetwork_mode = "none"\n')


@pytest.fixture
def ws(tmp_path: Path, docker_ready: None) -> Iterator[Path]:
    rules: dict[str, Any] = {n: {} for n in TASKS}
    rules["shy"] = rule_for({"few_shot": False})
    with serve(Policy(rules=rules)) as url:
        root = tmp_path / "ws"
        (root / "harness_configs").mkdir(parents=True)
        cfg = CONFIG.format(endpoint=url)
        cfg = cfg[: cfg.index("search_space:")] + "search_space:\n  sampling.temperature: [0.2]\n"
        (root / "harness_configs" / "default.yaml").write_text(cfg)
        init_workspace(root, starter_tasks=False)
        for name, (template, split) in TASKS.items():
            make_task(root / "tasks", name, toml=_toml(name, template, split))
        yield root


def test_expand_draws_fewshot_candidates_from_passing_train_trajectories(ws: Path) -> None:
    ran = rsi(ws, "run", str(ws / "tasks" / "easy-h"), "--agent", "harness", "--json")
    assert ran.returncode == 0, ran.stderr[-2000:]
    holdout = {r[0] for r in db_rows(ws, "SELECT id FROM trials WHERE task_name='easy-h' AND passed=1")}
    assert holdout, "the holdout task's passing trajectory is not on record"

    res = rsi(ws, "expand", "--budget", "30", "-k", "1", "--proposals", "0", "--fewshot", "1", "--json", timeout=500)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    rows = db_rows(ws, "SELECT label, config_digest, source_trial FROM search_candidates "
                       "WHERE job_id=? AND origin='fewshot' ORDER BY id", (out["job_id"],))
    assert [r[0] for r in rows] == ["fewshot:k=1:draw=1", "fewshot:k=1:draw=2"]
    base = db_rows(ws, "SELECT harness_config_digest FROM generations WHERE id='gen-0000'")[0][0]
    trials = {r[0]: r[1:] for r in db_rows(ws, "SELECT id, task_name, passed, split, harness_config_digest "
                                               "FROM trials WHERE agent='harness'")}
    sources = [trials[r[2]] for r in rows]
    assert all(r[2] not in holdout for r in rows)
    assert all(passed and split == "train" and digest == base for _, passed, split, digest in sources)
    # one per template while templates are left: the two draws come from different templates
    assert {TASKS[name][0] for name, *_ in sources} == {"text/lines", "files/copy"}
    stored = {r[0]: r[1] for r in db_rows(ws, "SELECT digest, origin FROM configs")}
    assert all(stored[r[1]] == "fewshot" for r in rows)
    # a few-shot candidate fixes `shy`, confirmed by two passes: a config verdict naming it
    kinds = {a["task"]: a for a in json.loads(rsi(ws, "attribution", "--json").stdout)}
    assert kinds["shy"]["kind"] == "config" and kinds["shy"]["variant"].startswith("fewshot:k=1:draw="), kinds
    assert "shy" in out["coverage"]["covered"]
