"""Results from data (issue 38 item 4): each benchmark writes a JSON record, and docs/results.md is what
scripts/render_results.py renders from the newest records, never typed by hand."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

import render_results  # noqa: E402
from _records import Recorder, load_records, target_met  # noqa: E402

# scripts in benchmarks/ that measure nothing themselves (fixtures and shared code)
NOT_BENCHMARKS = {"_records.py", "policy_server.py", "search_tables.py"}


def test_the_results_page_is_what_the_records_render() -> None:
    res = subprocess.run([sys.executable, "scripts/render_results.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    page = (ROOT / "docs" / "results.md").read_text()
    records = load_records(ROOT / "benchmarks" / "records")
    assert {r.script for r in records} >= {"demo", "train_throughput", "store_scale"}
    for r in records:
        assert f"## {r.title}" in page and f"`{r.commit}`" in page
        for f in r.figures:
            assert render_results.fmt(f.value, f.unit) in page, (r.script, f.id)


def test_every_benchmark_script_writes_a_record() -> None:
    scripts = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name not in NOT_BENCHMARKS)
    assert scripts
    silent = [p.name for p in scripts if not re.search(r"\bRecorder\(", p.read_text())
              or ".write()" not in p.read_text()]
    assert silent == [], f"benchmarks that print figures but write no record: {silent}"


def test_a_record_carries_where_and_what_and_the_page_shows_a_missed_target(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSI_BENCH_RECORDS", str(tmp_path))
    rec = Recorder("speedy", "A speed figure", argv=["--quick"], context="what was run")
    rec.add("ratio", "overhead over raw docker", 1.31, "x", target="<= 1.15", compare={"seed": 1.4})
    rec.add("rate", "trials per hour", 475.0, "trials/h", target=">= 300")
    rec.add("note_only", "decision", "promoted")
    path = rec.write()
    assert path == tmp_path / "speedy.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["command"] == "python benchmarks/speedy.py --quick"
    assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", data["commit"]) and data["date"].endswith("Z")
    assert data["machine"]["cpus"] >= 1 and data["machine"]["python"]
    figs = {f["id"]: f for f in data["figures"]}
    assert figs["ratio"]["met"] is False and figs["rate"]["met"] is True and figs["note_only"]["met"] is None
    page = render_results.render(load_records(tmp_path))
    assert "Targets: 1 of 2 met." in page
    assert "- overhead over raw docker (A speed figure): 1.31x, target <= 1.15" in page
    assert "| overhead over raw docker | **1.31x** | <= 1.15 | **not met** | seed: 1.40x |" in page
    assert "what was run" in page


def test_records_off_writes_nothing_and_a_rerun_replaces_the_record(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSI_BENCH_RECORDS", "off")
    rec = Recorder("x", "X")
    rec.add("a", "a", 1.0)
    assert rec.write() is None
    monkeypatch.setenv("RSI_BENCH_RECORDS", str(tmp_path))
    rec.write()
    rec2 = Recorder("x", "X")
    rec2.add("a", "a", 2.0)
    rec2.write()
    assert [f.value for r in load_records(tmp_path) for f in r.figures] == [2.0]
    assert Recorder("empty", "E").write() is None  # nothing measured: no record pretends otherwise


def test_a_malformed_record_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"schema_version": 1, "script": "bad"}))
    with pytest.raises(ValueError, match=r"bad\.json: not a benchmark record"):
        load_records(tmp_path)
    res = subprocess.run([sys.executable, "scripts/render_results.py", "--records", str(tmp_path), "--out",
                          str(tmp_path / "out.md")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and "bad.json" in res.stderr and not (tmp_path / "out.md").exists()


def test_targets_parse_or_fail_clearly() -> None:
    assert target_met("<= 1.15", 1.15) and not target_met("< 0.05", 0.05) and target_met(">= 2", 2.4)
    assert target_met("== 0", 0.0) and not target_met("> 1e-3", 1e-4)
    with pytest.raises(ValueError, match="operator and a number"):
        target_met("about 2", 2.0)
