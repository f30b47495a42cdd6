"""`rsi demo`: one cycle sized for a 2-core machine with the bundled SmolLM2-135M, on a workspace it creates."""

from __future__ import annotations

from pathlib import Path

from rsi.loop.cycle import CycleRequest

# Discover draws from the two procedural families in which that model passes some level-1 tasks (text: count
# lines; files: write a file); elsewhere it passes nothing, so there would be nothing to train on. Probes and
# baseline attempts are several per task, so the tasks it sometimes solves yield accepted trajectories and
# groups with reward variance.
DEMO_GENERATORS = ("text", "files")
DEMO_TRAIN = {"steps": 48, "batch_size": 4, "max_seq_len": 1024}


def demo_request(budget: float) -> CycleRequest:
    # the demo's workspace starts empty, so discover gets more than the default share: train tasks and the
    # holdout split the paired test needs both come from it
    # 8 holdout tasks: with 5 (the paired test's minimum) every one must improve for p < 0.05
    return CycleRequest(budget=budget, discover_share=0.65, holdout_target=8, n=10, generators=list(DEMO_GENERATORS),
                        attempts=2, expand_attempts=4, proposals=1, round_size=4, steps=DEMO_TRAIN["steps"],
                        concurrency=2)


def demo_settings(root: Path) -> None:
    """The demo's training numbers in the workspace's rsi.yaml (where `rsi update` reads them)."""
    import yaml

    from rsi.store.files import write_atomic

    path = root / "rsi.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    train = data.setdefault("train", {})
    train.update(DEMO_TRAIN)
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))


__all__ = ["DEMO_GENERATORS", "DEMO_TRAIN", "demo_request", "demo_settings"]
