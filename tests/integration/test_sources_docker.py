"""Training-data sources for real (issue 36): oracle replays in Docker sandboxes, a hinted rollout of the real model,
and an update dry run over them, all through the CLI as a user runs them.

- every starter train task's reference, replayed through the production harness, passes its verifier with real
  observations, at the task's integrity level, with no model call, and its trajectory is the serving config's
  rendering (system and task prompts, one fenced command per turn, the finish word);
- a hinted rollout of the real SmolLM2 shows the model a message the serving prompt lacks, and the stored
  trajectory records where, so update can remove it;
- `rsi update --dry-run` counts the replays as `oracle` samples and writes nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rsi.harness.atif import load_trajectory
from tests.integration.test_harness_run import family_tasks, rsi, ws  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(900)]


def test_replays_pass_in_docker_and_hinted_rollouts_record_their_hint(ws: tuple[Path, dict[str, str]]) -> None:  # noqa: F811
    root, env = ws
    train = [d for d in sorted((root / "tasks").iterdir()) if 'split = "holdout"' not in (d / "task.toml").read_text()]
    assert len(train) >= 8
    r = rsi("run", *map(str, train), "--agent", "oracle-replay", "-n", "3", "--json", env=env, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    trials = json.loads(r.stdout)["trials"]
    assert len(trials) == len(train) and all(t["agent"] == "oracle-replay" for t in trials)
    failed = [(t["task"], t["error_type"], t["error_message"]) for t in trials if not t["passed"]]
    assert not failed, failed
    for t in trials:
        assert t["integrity"] in ("declared_outputs", "snapshot"), t
        assert t["tokens"]["prompt"] == 0 and t["tokens"]["completion"] == 0, "a replay calls no model"
        traj = load_trajectory(Path(t["trial_dir"]) / "trajectory.json")
        msgs = traj.rsi["messages"]
        replies = [m["content"] for m in msgs[2 + len(traj.rsi["few_shot"]):] if m["role"] == "assistant"]
        assert replies[-1] == "DONE" and all(x.startswith("```bash\n") for x in replies[:-1]), replies
        assert traj.rsi["source"] == "oracle" and msgs[0]["content"].startswith("You are a shell agent")

    # one hinted rollout of the real model (the whole reference as the hint)
    task = next(d for d in train if d.name == "hello-file")
    r = rsi("run", str(task), "--agent", "hinted", "--variant", "hint-3", "--json", env=env, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    (t,) = json.loads(r.stdout)["trials"]
    assert t["status"] == "done" and t["error_type"] not in ("model_unavailable", "sandbox_error"), t
    assert t["tokens"]["completion"] > 0, "the model itself acted"
    traj = load_trajectory(Path(t["trial_dir"]) / "trajectory.json")
    hint = traj.rsi["hint"]
    assert hint["level"] == 3 and traj.rsi["messages"][hint["index"]]["content"] == hint["text"]
    assert traj.rsi["source"] == "hinted:3"
    bad = rsi("run", str(task), "--agent", "hinted", "--variant", "hint-7", env=env, cwd=root)
    assert bad.returncode == 2 and "--variant" in bad.stderr

    # the replays are data: update counts them by source and, in a dry run, writes nothing. The starter train tasks
    # are other instances than the regression suite (suites/starter), so their replays train; a reworded copy of a
    # suite task is the suite task itself (same environment and reference) and is refused as a leak
    copies = []
    for d in train[:3]:
        src = root / "suites" / "starter" / d.name
        c = root / "tasks" / f"{d.name}-reworded"
        shutil.copytree(src, c)
        (c / "task.toml").write_text((c / "task.toml").read_text().replace(f'name = "{d.name}"', f'name = "{c.name}"')
                                     .replace('split = "holdout"', 'split = "train"'))
        (c / "instruction.md").write_text("Please do this: " + (c / "instruction.md").read_text())
        copies.append(c)
    r = rsi("run", *map(str, copies), "--agent", "oracle-replay", "-n", "3", env=env, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    r = rsi("update", "--dry-run", "--json", env=env, cwd=root)
    assert r.returncode == 2 and "same_instance" in r.stderr and "equals suite task" in r.stderr, r.stderr[-3000:]
    # other instances (another file in the environment) are data
    for c in copies:
        (c / "environment" / "other-instance.txt").write_text(f"{c.name}\n")
    r = rsi("run", *map(str, copies), "--agent", "oracle-replay", "-n", "3", env=env, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    r = rsi("update", "--dry-run", "--json", env=env, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    up = json.loads(r.stdout)
    assert up["dataset"]["path"] is None
    by_source = up["selection"]["samples"]["by_source"]
    # every starter train task's replay and the three other instances: the starter tasks are training data
    assert sum(by_source.values()) + up["selection"]["validation"]["accepted"] >= len(train) + 3, up["selection"]
    assert set(by_source) <= {"oracle", "hinted:3"}
    assert up["refused"].get("suite task", 0) == 0, up["refused"]
    assert up["selection"]["leakage"]["ok"] is True
    assert not (root / ".rsi" / "updates").exists()
