"""The front page and the docs site (issue 38): `mkdocs build --strict` passes (no broken link, every page in
the nav), the CLI reference is the one the Typer app generates today, and the README stays a front page: short,
with the two commands exactly as a user types them and links that lead somewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-m", "mkdocs", "--version"],
                                                         capture_output=True).returncode != 0:
        pytest.fail("mkdocs is missing: pip install -e '.[dev]' (mkdocs-material)")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    for page in ("index.html", "concepts/index.html", "trackers/index.html", "cli/index.html",
                 "results/index.html", "phases/promote/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_cli_reference_is_generated_from_the_app() -> None:
    res = subprocess.run([sys.executable, "scripts/gen_cli_docs.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "## `rsi cycle`" in text and "--report-to" in text


def test_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024, f"README is {len(readme.encode())} bytes"
    assert "scripts/setup.sh && rsi demo\n" in readme
    assert "scripts/setup.sh --dev && python3 -m pytest -q\n" in readme
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [x for x in links if not x.startswith("http")]
    assert local, "the README links to the docs"
    missing = [x for x in local if not (ROOT / x).exists()]
    assert missing == []
    assert "docs/results.md" in local
    results = (ROOT / "docs" / "results.md").read_text()
    assert "## rsi demo (issue 36)" in results


def test_the_tour_is_a_real_runs_output_and_speaks_to_users() -> None:
    res = subprocess.run([sys.executable, "scripts/capture_tour.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    tour = (ROOT / "docs" / "tour.md").read_text()
    assert len(re.findall(r"^# ", tour, flags=re.M)) == 1, "one H1"
    assert tour.count("```console") >= 8  # each command with what it printed
    for internal in ("issue ", "the seed", "P1", "DESIGN"):
        assert internal not in tour, internal
    prose = [ln for ln in tour.split("```") [::2]]  # outside code blocks
    sentences = [s for block in prose for s in re.split(r"(?<=[.!?])\s", block) if s.strip()]
    assert max(len(s.split()) for s in sentences) <= 60, max(sentences, key=lambda s: len(s.split()))


def test_no_doc_cites_a_file_outside_the_repository() -> None:
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), ROOT / "pyproject.toml"]:
        text = page.read_text()
        assert "DESIGN §" not in text and "../shared/" not in text, page
