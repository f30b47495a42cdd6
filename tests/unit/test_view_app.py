"""`rsi view` served in-process (FastAPI's TestClient) on a workspace with one finished cycle (tests/viewkit.py):
every page, every filter of the trials list, sorting, keyset pages, full-text search, the trial page, the compare
grid and its step-aligned diff, the diff page; and a workspace written through the store API for what a cycle on
fakes does not produce (errors, tamper findings, long steps). The store is opened read-only throughout."""

from __future__ import annotations

import html
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rsi.core.errors import StoreError
from rsi.loop.context import WorkspaceContext
from rsi.store.tables import TrialRow
from rsi.view.app import create_app
from rsi.view.context import ViewContext
from rsi.view.trajectory import ViewStep, align
from tests.viewkit import LOSSES

ROW = re.compile(r'<tr class="trial-row" ([^>]*)>')
ATTR = re.compile(r'data-([a-z_]+)="([^"]*)"')


def rows(page: str) -> list[dict[str, str]]:
    return [{k: html.unescape(v) for k, v in ATTR.findall(m)} for m in ROW.findall(page)]


def link(page: str, element_id: str) -> str | None:
    m = re.search(rf'id="{element_id}" href="([^"]+)"', page)
    return html.unescape(m.group(1)) if m else None


def db(root: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{root / '.rsi' / 'rsi.db'}?mode=ro", uri=True) as conn:
        return list(conn.execute(sql, args).fetchall())


@pytest.fixture(scope="module")
def client(cycle_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    ctx = ViewContext.open(cycle_workspace)
    app = create_app(ctx, index_path=tmp_path_factory.mktemp("view-index") / "search.db")
    with TestClient(app) as c:
        yield c
    ctx.close()


def test_generations_page_shows_the_lineage_the_gates_and_the_rates(client: TestClient) -> None:
    r = client.get("/generations")
    assert r.status_code == 200
    page = r.text
    assert 'id="gen-gen-0000"' in page and 'id="gen-gen-0001"' in page
    row1 = page[page.index('id="gen-gen-0001"'):].split("</tr>")[0]
    assert "promoted" in row1 and "agent-g0001-" in row1 and "← gen-0000" in row1
    promo = page[page.index('class="promotion"'):]
    assert "gen-0000 → gen-0001" in promo and ">promoted<" in promo
    assert "significance" in promo and "pass" in promo
    assert 'href="/diff?a=gen-0000&amp;b=gen-0001"' in promo
    assert '<figure class="chart" id="chart-rates"><svg' in page


def test_jobs_page_counts_each_jobs_trials_by_outcome(client: TestClient, cycle_workspace: Path) -> None:
    page = client.get("/jobs").text
    for job_id, kind, n, passes in db(cycle_workspace, "SELECT j.id, j.kind, count(t.id), "
                                      "coalesce(sum(t.passed), 0) FROM jobs j LEFT JOIN trials t ON t.job_id = j.id "
                                      "GROUP BY j.id"):
        row = page[page.index(f'id="job-{job_id}"'):].split("</tr>")[0]
        assert f"<td>{kind}</td>" in row
        assert f"<td>{n}</td>" in row, row
        if passes:
            assert f'href="/trials?job={job_id}&amp;outcome=pass">{passes}</a>' in row
    (cycle_id,) = db(cycle_workspace, "SELECT id FROM jobs WHERE kind = 'cycle'")[0]
    only = client.get("/jobs?kind=promote").text
    assert "<td>promote</td>" in only and f'id="job-{cycle_id}"' not in only


@pytest.mark.parametrize("name,column", [
    ("generation", "generation"), ("arm", "arm_id"), ("task", "task_name"), ("split", "split"), ("job", "job_id"),
    ("agent", "agent"), ("integrity", "integrity")])
def test_each_column_filter_keeps_exactly_the_matching_trials(client: TestClient, cycle_workspace: Path,
                                                              name: str, column: str) -> None:
    values = [v for (v,) in db(cycle_workspace, f"SELECT DISTINCT {column} FROM trials WHERE {column} IS NOT NULL")]
    assert values
    value = sorted(values)[len(values) // 2]
    (expected,) = db(cycle_workspace, f"SELECT count(*) FROM trials WHERE {column} = ?", value)[0]
    got = rows(client.get("/trials", params={name: value}).text)
    assert got and all(r[name] == value for r in got)
    assert len(got) == min(expected, 50)
    assert f'id="count">{expected} matching' in client.get("/trials", params={name: value}).text


def test_outcome_family_and_verdict_filters(client: TestClient, cycle_workspace: Path) -> None:
    passed = rows(client.get("/trials?outcome=pass&split=holdout").text)
    n_pass = db(cycle_workspace, "SELECT count(*) FROM trials WHERE passed AND split = 'holdout'")[0][0]
    assert len(passed) == n_pass > 0 and all(r["outcome"] == "pass" and r["split"] == "holdout" for r in passed)
    failed = rows(client.get("/trials?outcome=fail&split=holdout").text)
    assert failed and all(r["outcome"] == "fail" for r in failed) and not {r["id"] for r in failed} & {
        r["id"] for r in passed}
    fam = rows(client.get("/trials?family=a").text)
    digests = {d for (d,) in db(cycle_workspace, "SELECT digest FROM tasks WHERE family = 'a'")}
    n_fam = db(cycle_workspace, f"SELECT count(*) FROM trials WHERE task_digest IN ({','.join('?' * len(digests))})",
               *digests)[0][0]
    assert len(fam) == n_fam > 0 and all(r["family"] == "a" for r in fam)
    model = rows(client.get("/trials?verdict=model").text)
    assert model and all(r["verdict"] == "model" and r["task"] == "hard0" for r in model)


def test_sorting_orders_the_rows(client: TestClient) -> None:
    for sort, key in (("reward", "reward"), ("turns", "turns"), ("tokens", "tokens"), ("duration", "duration")):
        for direction in ("asc", "desc"):
            got = [float(r[key] or -1) for r in rows(client.get(f"/trials?sort={sort}&dir={direction}").text)]
            assert got == sorted(got, reverse=direction == "desc"), (sort, direction)
    page = client.get("/trials?sort=turns&dir=desc").text
    assert 'sort=turns&amp;dir=asc' in page  # the header link flips the direction


def test_keyset_pages_cover_every_trial_once_and_go_back(client: TestClient, cycle_workspace: Path) -> None:
    total = db(cycle_workspace, "SELECT count(*) FROM trials")[0][0]
    assert total > 50  # more than one page
    for sort in ("newest", "finished", "reward", "task"):
        url: str | None = f"?sort={sort}"
        seen: list[str] = []
        pages: list[tuple[str, list[str]]] = []
        while url:
            page = client.get("/trials" + url).text
            ids = [r["id"] for r in rows(page)]
            pages.append((url, ids))
            seen += ids
            url = link(page, "next-page")
        assert len(seen) == len(set(seen)) == total, sort
        back = link(client.get("/trials" + pages[-1][0]).text, "prev-page")
        assert back and [r["id"] for r in rows(client.get("/trials" + back).text)] == pages[-2][1]


def test_bad_parameters_answer_400_and_unknown_trials_404(client: TestClient) -> None:
    r = client.get("/trials?sort=nonsense")
    assert r.status_code == 400 and "sort must be one of" in r.text
    r = client.get("/trials?outcome=maybe")
    assert r.status_code == 400 and "outcome must be one of" in r.text
    assert client.get("/trials/no-such-trial").status_code == 404


def test_full_text_search_finds_trials_by_what_their_trajectory_says(client: TestClient,
                                                                     cycle_workspace: Path) -> None:
    # the expand trials ran the harness against the policy server, whose solving command writes "ok"
    page = client.get("/trials?q=echo+ok&agent=harness").text
    got = rows(page)
    assert got and all(r["agent"] == "harness" for r in got)
    for r in got:
        tdir = db(cycle_workspace, "SELECT trial_dir FROM trials WHERE id = ?", r["id"])[0][0]
        text = (cycle_workspace / tdir / "trajectory.json").read_text()
        assert "echo" in text and "ok" in text
    assert "<mark>" in page
    assert rows(client.get("/trials?q=zebra-never-said").text) == []


def test_trial_page_shows_every_step_and_moves_through_the_list(client: TestClient, cycle_workspace: Path) -> None:
    listed = rows(client.get("/trials?agent=harness&sort=task&dir=asc").text)
    assert len(listed) >= 3
    mid = listed[1]
    page = client.get(f"/trials/{mid['id']}?agent=harness&sort=task&dir=asc").text
    tdir = db(cycle_workspace, "SELECT trial_dir FROM trials WHERE id = ?", mid["id"])[0][0]
    traj = json.loads((cycle_workspace / tdir / "trajectory.json").read_text())
    assert page.count('class="step src-') == len(traj["steps"]) > 0
    shown = html.unescape(page)
    for step in traj["steps"]:
        if step.get("message"):
            assert step["message"] in shown
    assert link(page, "next-trial") == f"/trials/{listed[2]['id']}?agent=harness&sort=task&dir=asc"
    assert link(page, "prev-trial") == f"/trials/{listed[0]['id']}?agent=harness&sort=task&dir=asc"
    assert "test-stdout.txt" in page and 'id="verifier-exit"' in page
    assert "e.key === 'j'" in page and "ArrowDown" in page


def test_compare_grid_counts_and_the_step_aligned_diff(client: TestClient, cycle_workspace: Path) -> None:
    page = client.get("/compare?split=holdout").text
    # the model's trials (here the scripted agent promote measured), each generation under its own config
    model = db(cycle_workspace, "SELECT t.task_name, t.generation, sum(t.passed), count(*), group_concat(t.id) "
                                "FROM trials t JOIN generations g ON g.id = t.generation "
                                "WHERE t.split = 'holdout' AND t.status = 'done' AND t.agent = 'better' "
                                "AND t.harness_config_digest = "
                                "json_extract(g.manifest_json, '$.harness_config.digest') "
                                "GROUP BY 1, 2")
    assert model
    for task, gen, passes, n, ids in model:
        cell = re.search(rf'data-col="{gen}" data-task="{task}" data-passes="{passes}" data-graded="{n}"[^>]*>'
                         r'<a href="([^"]+)">', page)
        assert cell, (task, gen, passes, n)
        listed = re.findall(r'<tr class="trial-row" data-id="([^"]+)"', client.get(html.unescape(cell.group(1))).text)
        assert sorted(listed) == sorted(ids.split(","))  # the cell links to exactly the trials it counted
    steps = re.findall(r'class="steps-link" href="([^"]+)"', page)
    assert steps
    diff = client.get(html.unescape(steps[0])).text
    summary = re.search(r'id="align-summary">([^<]*)<', diff)
    assert summary and "same" in summary.group(1)
    # A's default is the attempt whose outcome differs from B's (what changed)
    heads = re.findall(r'<th>gen-000[01]: <a href="/trials/[^"]+" class="(pass|fail)"', diff)
    assert heads == ["fail", "pass"]
    assert client.get("/compare/steps?task=h0").status_code == 400
    assert client.get("/compare?by=arm&split=").status_code == 200


def test_diff_page_leads_with_the_gates_and_links_flips_to_trials(client: TestClient) -> None:
    page = client.get("/diff").text
    assert 'id="gen-a">gen-0000<' in page and 'id="gen-b">gen-0001<' in page
    assert page.index('id="gates"') < page.index('id="flipped"') < page.index("Pass rate per family")
    assert "significance" in page and "one-sided" in page
    flipped = page[page.index('id="flipped"'):].split("</table>")[0]
    assert flipped.count('class="flip-fixed"') >= 5
    trial_links = re.findall(r'class="trial-link" href="(/trials/[^"]+)"', flipped)
    assert trial_links and all(client.get(u).status_code == 200 for u in trial_links[:4])
    assert 'class="steps-link" href="/compare/steps?task=' in flipped
    assert 'id="chart-training"' in page and f"{LOSSES[0]:.4f} → {LOSSES[-1]:.4f}" in page


def test_the_viewer_never_writes_the_store(cycle_workspace: Path, tmp_path: Path) -> None:
    db_file = cycle_workspace / ".rsi" / "rsi.db"
    before = db_file.read_bytes()
    ctx = ViewContext.open(cycle_workspace)
    try:
        with pytest.raises(Exception, match="readonly|read-only"):
            ctx.store.finish_job(ctx.store.list_jobs()[0].id, "done")
    finally:
        ctx.close()
    assert db_file.read_bytes() == before


# --- a workspace written through the store API: errors, tamper findings, a long step ---------------------------

LONG = "x" * 30_000 + " END-OF-LONG-OUTPUT"


def _trajectory(tdir: Path) -> None:
    tdir.mkdir(parents=True)
    steps = [{"step_id": 1, "source": "user", "message": "Task t: do it"},
             {"step_id": 2, "source": "agent", "message": "I will cat",
              "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "cat big"}}],
              "observation": {"results": [{"source_call_id": "c1", "content": LONG}]},
              "metrics": {"prompt_tokens": 11, "completion_tokens": 7}}]
    (tdir / "trajectory.json").write_text(json.dumps({"schema_version": "ATIF-v1.7", "agent": {
        "name": "rsi-harness", "version": "0"}, "steps": steps}))
    (tdir / "verifier").mkdir()
    (tdir / "verifier" / "test-stdout.txt").write_text("FAILED: /app/out.txt differs")


@pytest.fixture
def written(workspace: WorkspaceContext) -> Iterator[Path]:
    g = workspace.generation("gen-0000")
    job = "job-20260101-000000-aaaaaa"
    trials = []
    for i, (err, tampered) in enumerate([(None, False), ("agent_timeout", False), ("sandbox_error", False),
                                         (None, True)]):
        tid = f"{job}.t.harness-gen-0000.{i + 1}"
        tdir = f".rsi/jobs/{job}/{tid}"
        _trajectory(workspace.ws.root / tdir)
        trials.append(TrialRow(
            id=tid, job_id=job, task_name="t", task_digest="d" * 64, generation="gen-0000", agent="harness",
            attempt=i + 1, status="done", reward=0.0, passed=False, error_type=err, trial_dir=tdir, split="train",
            integrity="snapshot", turns=1, verifier_exit_code=1, harness_config_digest=g.harness_config.digest,
            tampered_paths_json=json.dumps(["/usr/bin/cat"] if tampered else []),
            tamper_reasons_json=json.dumps(["/usr/bin/cat: modified image file outside the writable roots"]
                                           if tampered else []),
            changed_paths_json=json.dumps(["/app/out.txt"]), finished_at=None))
    workspace.store.create_job(job, agent="harness", generation="gen-0000", harness_config_digest=None, attempts=4,
                               concurrency=1, task_paths=[], tasks_fingerprint="", trials=trials, phase="run")
    workspace.store.close()
    yield workspace.ws.root


def test_error_type_filter_tamper_reasons_and_untruncated_steps(written: Path, tmp_path: Path) -> None:
    ctx = ViewContext.open(written)
    with TestClient(create_app(ctx, index_path=tmp_path / "s.db")) as c:
        timeouts = rows(c.get("/trials?error_type=agent_timeout").text)
        assert [r["error_type"] for r in timeouts] == ["agent_timeout"]
        infra = rows(c.get("/trials?outcome=infra").text)
        assert [r["error_type"] for r in infra] == ["sandbox_error"]
        assert len(rows(c.get("/trials?outcome=fail").text)) == 3  # infra is not a failure of the model
        page = c.get("/trials/job-20260101-000000-aaaaaa.t.harness-gen-0000.4").text
        assert "/usr/bin/cat: modified image file outside the writable roots" in page
        assert LONG in page  # every step in full: a 30k-character observation is not cut
        assert "FAILED: /app/out.txt differs" in page and "cat big" in page
        assert rows(c.get("/trials?q=END-OF-LONG-OUTPUT").text)
    ctx.close()


def test_an_older_store_is_refused_with_the_fix(written: Path) -> None:
    with sqlite3.connect(written / ".rsi" / "rsi.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    with pytest.raises(StoreError, match="run any rsi command"):
        ViewContext.open(written)


def test_alignment_pairs_equal_actions_and_keeps_every_step() -> None:
    def step(i: int, cmd: str) -> ViewStep:
        return ViewStep(i, "agent", "", None, [{"id": "", "function": "bash", "arguments": cmd}], [], {}, None)

    a = [step(1, "ls"), step(2, "cat in.txt"), step(3, "wc -w in.txt > out"), step(4, "done")]
    b = [step(1, "ls"), step(2, "cat in.txt"), step(3, "wc -l in.txt > out"), step(4, "cat out"), step(5, "done")]
    got = [(r.kind, r.a.index if r.a else None, r.b.index if r.b else None) for r in align(a, b)]
    assert got == [("same", 1, 1), ("same", 2, 2), ("changed", 3, 3), ("only_b", None, 4), ("same", 4, 5)]

    def text(i: int, msg: str) -> ViewStep:  # the `text` action format: the command is a fenced block
        return ViewStep(i, "agent", msg, None, [], [], {}, None)

    a = [text(1, "Let me count.\n```bash\nwc -w in.txt > out\n```"), text(2, "DONE")]
    b = [text(1, "Counting lines:\n```bash\nwc -w in.txt > out\n```\n"), text(2, "```bash\ncat out\n```"),
         text(3, "DONE")]
    assert [r.kind for r in align(a, b)] == ["same", "only_b", "same"]  # same command, other words: same action


def test_view_imports_no_sql_driver() -> None:
    """Only rsi/store issues SQL: the viewer reaches the database through the read-only store."""
    import ast

    pkg = Path(__file__).resolve().parents[2] / "rsi" / "view"
    bad = []
    for path in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("sqlite3", "sqlalchemy", "sqlmodel")]
    assert bad == []


def test_promote_writes_the_report_that_leads_with_the_gates(cycle_workspace: Path, tmp_path: Path) -> None:
    import shutil

    from rsi.cli.promote import _write_report

    root = tmp_path / "copy"
    shutil.copytree(cycle_workspace, root, ignore=shutil.ignore_patterns("cache", "locks"))
    assert not (root / ".rsi" / "reports" / "diff-gen-0000-gen-0001.html").exists()
    ctx = WorkspaceContext.open(root)
    try:
        _write_report(ctx, "gen-0000", "gen-0001", quiet=True)
    finally:
        ctx.store.close()
    page = (root / ".rsi" / "reports" / "diff-gen-0000-gen-0001.html").read_text()
    assert re.findall(r"<h2[^>]*>([^<]*)</h2>", page)[0] == "Decision: the promotion gates"
    assert "significance" in page and 'id="chart-training"' in page
