"""`rsi view` in a real browser: the command started as a user starts it (a subprocess on a free port) over a
workspace with one finished cycle (tests/viewkit.py), driven with Playwright on Debian's Chromium (launched by
`executable_path`; nothing downloads a browser). A user goes generations -> the promotion -> a flipped task ->
its trial -> a step (keys), applies a filter and reloads the URL, and opens the step-aligned diff; no page
logs a console error. Screenshots of each page are kept under the test's tmp dir."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_diff_html import chromium


@pytest.fixture
def served(cycle_workspace: Path, tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("RSI_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "rsi", "-w", str(cycle_workspace), "view", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 180)
        assert ready, "rsi view printed no URL within 180 s"
        line = proc.stdout.readline()  # the command prints the URL once its port is bound
        assert "rsi view: open http://127.0.0.1:" in line, line + (proc.stdout.read() if proc.poll() else "")
        url = line.split("open ", 1)[1].split()[0].rstrip("/")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_user_answers_why_gen_0001_was_promoted(served: str, tmp_path: Path) -> None:
    exe = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:  # a clear failure, never a skip: scripts/setup.sh installs it (the dev extra)
        raise AssertionError(f"playwright is missing ({e}): pip install -e '.[dev]' (scripts/setup.sh does)") from e
    shots = tmp_path / "screenshots"
    shots.mkdir()
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        page.set_default_timeout(30_000)

        def shot(name: str) -> None:
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

        # generations: the lineage, and the promotion with its gate table
        page.goto(served + "/")
        assert page.url.endswith("/generations")
        assert "promoted" in page.inner_text("#gen-gen-0001")
        assert page.locator("section.promotion table.gates tr").count() > 2
        assert page.locator("#chart-rates svg").count() == 1
        shot("1-generations")
        # the promotion -> the diff: the gates first, then the tasks that flipped
        page.click("section.promotion a.diff-link")
        page.wait_for_url("**/diff?a=gen-0000&b=gen-0001")
        assert page.locator("#gates").count() == 1 and page.locator("#flipped tr.flip-fixed").count() >= 5
        shot("2-diff")
        # a flipped task -> the passing trial under gen-0001
        row = page.locator("#flipped tr.flip-fixed").first
        task = row.locator("td.task").inner_text()
        row.locator("td:nth-child(8) a.trial-link").first.click()
        page.wait_for_url("**/trials/**")
        assert page.inner_text("#outcome").startswith("pass") and task in page.inner_text("dl.meta")
        shot("3-trial")
        # a step: j moves to the next step (and the URL names it), k back
        steps = page.locator(".step").count()
        assert steps >= 1
        page.keyboard.press("j")
        assert page.locator(".step.current").get_attribute("id") == "step-1" and page.url.endswith("#step-1")
        page.keyboard.press("ArrowDown")
        assert page.locator(".step.current").get_attribute("id") == f"step-{min(2, steps)}"
        page.keyboard.press("k")
        assert page.locator(".step.current").get_attribute("id") == "step-1"
        shot("4-step")
        # the trials list: apply a filter; the URL holds it, and a reload shows the same list
        page.goto(served + "/trials")
        page.select_option("#f-outcome", "pass")
        page.select_option("#f-split", "holdout")
        page.click("#apply")
        page.wait_for_url("**/trials?**outcome=pass**")
        assert "split=holdout" in page.url
        before = page.locator("tr.trial-row").evaluate_all("rs => rs.map(r => r.dataset.id)")
        assert before and all(o == "pass" for o in page.locator("tr.trial-row").evaluate_all(
            "rs => rs.map(r => r.dataset.outcome)"))
        page.reload()
        assert page.locator("#f-outcome").input_value() == "pass"
        assert page.locator("tr.trial-row").evaluate_all("rs => rs.map(r => r.dataset.id)") == before
        shot("5-trials-filtered")
        # n moves to the next trial of the filtered list
        page.locator("tr.trial-row a.trial").first.click()
        page.wait_for_url("**/trials/**")
        first = page.inner_text("#trial-id")
        page.keyboard.press("n")
        page.wait_for_function(f"document.getElementById('trial-id').textContent !== {first!r}")
        assert page.inner_text("#trial-id") == before[1]
        # the compare grid -> the step-aligned diff of one task under gen-0000 and gen-0001
        page.goto(served + "/compare?split=holdout")
        assert page.locator("#grid td.cell").count() >= 12
        shot("6-compare")
        page.locator("a.steps-link").first.click()
        page.wait_for_url("**/compare/steps?**")
        assert page.locator("#aligned tr").count() >= 2 and "aligned on the action sequence" in page.inner_text(
            "#align-summary")
        shot("7-step-diff")
        for path in ("/jobs", "/trials?q=ok"):
            page.goto(served + path)
            shot("8-" + path.strip("/").split("?")[0])
        browser.close()
    assert errors == [], errors
    assert sorted(p.name for p in shots.iterdir())[:7] == [
        "1-generations.png", "2-diff.png", "3-trial.png", "4-step.png", "5-trials-filtered.png", "6-compare.png",
        "7-step-diff.png"]
    assert all(p.stat().st_size > 10_000 for p in shots.iterdir())
