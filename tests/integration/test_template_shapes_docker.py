"""Every reference shape in the base image (issue 46): for each level-1/2 template of the procedural families, one
instance run once per shape of its reference (`Level.shapes`), and for one composition per operation each chain of
its steps' shapes, each graded by its own verifier, all in one container of the base image, so the tools each shape
leans on (mawk, GNU sed and find, perl, python3, bash's globstar) are the sandbox's, not the host's. The gate itself
(snapshot grading, declared reads) is tests/integration/test_templates_docker.py's; this one runs ~250 shapes in
about a minute."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from rsi.core.discover import TaskDraft
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.compose import ComposeGenerator
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.sandbox.base_image import resolve_base_image
from tests.unit.test_template_shapes import FAMILIES, _one_of_each_operation

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

# Each case: its environment copied to a fresh /app, its solve.sh run there, then its test.sh; one line per case.
RUNNER = r"""
set -u
for c in /cases/*/; do
  id=$(basename "$c")
  rm -rf /app /logs/verifier && mkdir -p /app /logs/verifier
  cp -a "$c/env/." /app/
  (cd /app && bash "$c/solve.sh") >/tmp/solve.out 2>&1
  (cd /app && bash "$c/test.sh") >/tmp/test.out 2>&1
  echo "CASE $id $(cat /logs/verifier/reward.txt 2>/dev/null || echo none) $(tail -n 1 /tmp/test.out)"
done
"""


def _cases() -> dict[str, TaskDraft]:
    load_generators()
    out: dict[str, TaskDraft] = {}
    for family in FAMILIES:
        g = GENERATORS.create(family)
        assert isinstance(g, ProceduralFamily)
        for t in g.templates:
            if t.level > 2:
                continue
            req = GenRequest(seed=0, difficulty=t.level, template=f"{family}/{t.id}")
            tpl, lv = g.draw(req)
            for k in range(len(lv.references)):
                out[f"{family}.{t.id}.{k}"] = g.draft(req, tpl, lv, k)
    cg = ComposeGenerator()
    for i, tid in enumerate(_one_of_each_operation()):
        req = GenRequest(seed=i, difficulty=3, template=tid)
        tpl, lv = cg.draw(req)
        for k in range(len(lv.references)):
            out[f"compose.{tid.removeprefix('compose/')}.{k}"] = cg.draft(req, tpl, lv, k)
    return out


def _stage(root: Path, cases: dict[str, TaskDraft]) -> None:
    for name, d in cases.items():
        case = root / name
        (case / "env").mkdir(parents=True)
        for rel, text in d.env_files.items():
            (case / "env" / rel).parent.mkdir(parents=True, exist_ok=True)
            (case / "env" / rel).write_text(text)
        (case / "solve.sh").write_text(d.solve_sh)
        (case / "test.sh").write_text(d.test_sh)
    for p in root.rglob("*"):  # readable by the container's root whatever the host's umask
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


def test_every_reference_shape_passes_in_the_base_image(tmp_path: Path) -> None:
    cases = _cases()
    assert len(cases) > 200
    _stage(tmp_path / "cases", cases)
    client = docker.from_env(timeout=900)
    out = client.containers.run(
        resolve_base_image(None), ["bash", "-c", RUNNER], remove=True, network_mode="none",
        volumes={str(tmp_path / "cases"): {"bind": "/cases", "mode": "ro"}}, labels={"rsi.test": "shapes"},
    ).decode(errors="replace")
    got = {ln.split()[1]: ln for ln in out.splitlines() if ln.startswith("CASE ")}
    assert set(got) == set(cases), sorted(set(cases) - set(got))[:5]
    failed = [ln for ln in got.values() if ln.split()[2] != "1"]
    assert not failed, "\n".join(failed[:20]) + "".join(f"\n{cases[f.split()[1]].solve_sh}" for f in failed[:3])
