"""Write docs/tour.md from a real run: every command in the tour is run, and its real output is what the page shows.

    python scripts/capture_tour.py --demo rsi-demo   # run the tour's commands in /tmp/rsi-tour (a fresh
                                                      # workspace; the last part reads a copy of a finished demo)
    python scripts/capture_tour.py --render          # re-render the page from the saved capture (prose edits)
    python scripts/capture_tour.py --check           # exit 1 when docs/tour.md is not what the capture renders,
                                                      # or the capture's commands are not the tour's (test_docs.py)

The capture (scripts/tour_capture.json) keeps each command's output, the commit and the date, so the page cannot
drift from what rsi printed: change a command here and the check fails until the tour is captured again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "tour.md"
CAPTURE = ROOT / "scripts" / "tour_capture.json"
HERE = Path("/tmp/rsi-tour")  # where the commands run (made afresh, removed after)
WS = "tour"  # the fresh workspace, as the page names it
DEMO = "rsi-demo"  # the demo's workspace, as the page names it

# (heading, prose before the commands, commands, most output lines to show per command)
SECTIONS: list[tuple[str, str, list[str], int]] = [
    ("Make a workspace",
     "A workspace holds the contract (how trials are graded and what may train), the harness config (prompts, "
     "tools, limits), tasks, and the generations. `rsi init` makes one and registers gen-0000: the bundled "
     "SmolLM2-135M with no adapter.",
     [f"rsi init {WS}"], 20),
    ("Check the machine",
     "`rsi doctor` checks the Docker daemon, the base image, the database and the model endpoint, and prints the "
     "fix for each gap.",
     [f"rsi -w {WS} doctor"], 30),
    ("Look at the tasks",
     "Each task is a directory: an instruction, an environment, a reference solution and a verifier. Train tasks "
     "may become training data; holdout tasks are sealed and only measured.",
     [f"rsi -w {WS} tasks list"], 24),
    ("Run the controls",
     "Before the model, check the tasks themselves. The reference solution (`--agent oracle`) must pass, and "
     "doing nothing (`--agent nop`) must fail. Each trial runs in its own Docker container.",
     [f"rsi -w {WS} run hello-file append-line --agent oracle",
      f"rsi -w {WS} run hello-file append-line --agent nop"], 30),
    ("Run the model",
     "`--agent harness` is the model acting through the harness config. `-k 2` attempts each task twice; `-n 2` "
     "runs two trials at a time. A 135M model passes few tasks: that is what the loop is for.",
     [f"rsi -w {WS} run hello-file rename-file --agent harness -k 2 -n 2"], 40),
    ("See what ran",
     "Every job and trial is in the workspace's SQLite database. Listings take `--json`.",
     [f"rsi -w {WS} jobs list"], 20),
    ("The loop",
     "`rsi demo` runs the whole loop once in a fresh workspace. `discover` writes new tasks at the edge of what "
     "the model solves and keeps only valid ones. `expand` runs them, blames each failure on the model, the task, "
     "the config or the infrastructure, and collects training data. `update` trains a LoRA adapter into a "
     "candidate generation. `promote` gates the candidate on a sealed holdout. The commands below read a "
     "finished demo.",
     [f"rsi -w {DEMO} generations list",
      f"rsi -w {DEMO} diff gen-0000 gen-0001"], 60),
]

NEXT = """## Next

- [Your own model](own-model.md): point rsi at your own endpoint and trainer.
- The phases one at a time: [discover](phases/discover.md), [expand](phases/expand.md),
  [update](phases/update.md), [promote](phases/promote.md).
- [The viewer](viewer.md): `rsi -w rsi-demo view` shows the same in a browser.
- [Results](results.md): what the newest demo measured.
"""


def commands() -> list[str]:
    return [c for _, _, cmds, _ in SECTIONS for c in cmds]


def run_all(demo: Path) -> dict[str, object]:
    """Run every command in a fresh directory (HERE), where the demo's commands read a copy of `demo` named
    rsi-demo; the page shows what they printed, paths included."""
    out: dict[str, str] = {}
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1", TERM="dumb", HF_HUB_OFFLINE="1")
    env.pop("RSI_HOME", None)
    shutil.rmtree(HERE, ignore_errors=True)
    HERE.mkdir(parents=True)
    shutil.copytree(demo, HERE / DEMO, symlinks=True)
    try:
        for cmd in commands():
            print(f"$ {cmd}", file=sys.stderr, flush=True)
            r = subprocess.run([sys.executable, "-m", "rsi", *cmd.split()[1:]], cwd=HERE, env=env,
                               capture_output=True, text=True, timeout=1800)
            text = r.stdout + r.stderr
            if r.returncode not in (0, 1):
                raise SystemExit(f"{cmd} exited {r.returncode}:\n{text[-2000:]}")
            out[cmd] = text.rstrip("\n")
    finally:
        shutil.rmtree(HERE, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"commit": commit, "date": datetime.now(UTC).strftime("%Y-%m-%d"), "outputs": out}


def _trim(text: str, limit: int) -> str:
    lines = text.splitlines()
    if len(lines) <= limit:
        return text
    return "\n".join(lines[:limit] + [f"… ({len(lines) - limit} more lines)"])


def render(capture: dict[str, object]) -> str:
    outputs = capture["outputs"]
    assert isinstance(outputs, dict)
    parts = [
        "<!-- generated by scripts/capture_tour.py from a real run (scripts/tour_capture.json): edit the script, "
        "then capture again -->",
        "# A tour",
        "",
        f"Each command below ran on commit `{capture['commit']}` on {capture['date']}, on a 2-core machine with "
        f"Docker and the bundled model, in `{HERE}`. The output under it is what it printed.",
        "",
        "First, set up the machine (Docker, the model, the base image):",
        "",
        "```bash\nscripts/setup.sh\n```",
        "",
    ]
    for heading, prose, cmds, limit in SECTIONS:
        parts += [f"## {heading}", "", prose, ""]
        for cmd in cmds:
            parts += ["```console", f"$ {cmd}", _trim(str(outputs[cmd]), limit), "```", ""]
    parts.append(NEXT)
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--demo", type=Path, help="a workspace where `rsi demo` finished: capture the tour again")
    group.add_argument("--render", action="store_true", help="write docs/tour.md from the saved capture")
    group.add_argument("--check", action="store_true", help="exit 1 when docs/tour.md or the capture is stale")
    args = ap.parse_args()
    if args.demo is not None:
        if not (args.demo / "generations" / "gen-0001.yaml").is_file():
            print(f"error: --demo {args.demo}: no finished demo there (generations/gen-0001.yaml)", file=sys.stderr)
            return 2
        CAPTURE.write_text(json.dumps(run_all(args.demo), indent=2, ensure_ascii=False) + "\n")
    capture = json.loads(CAPTURE.read_text())
    if args.check:
        missing = [c for c in commands() if c not in capture["outputs"]]
        if missing:
            print(f"{CAPTURE}: no output for {missing}: run python scripts/capture_tour.py --demo DIR",
                  file=sys.stderr)
            return 1
        if not OUT.is_file() or OUT.read_text() != render(capture):
            print(f"{OUT}: not what the capture renders: run python scripts/capture_tour.py --render", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(render(capture))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
