"""The HTML diff report opened in headless Chromium: every chart renders (an SVG with a drawn, non-empty
box) and both generation ids are on the page; the page loads nothing from the network."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.loop.context import WorkspaceContext
from rsi.report.diff import build_diff
from rsi.report.diff_html import html
from tests.unit.test_diff_report import ws  # noqa: F401 - the fixture: gen-0001 beat gen-0000 on the holdout

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
CHECK = """<script>
window.addEventListener('load', () => {
  const rows = [...document.querySelectorAll('figure.chart')].map(f => {
    const svg = f.querySelector('svg'); const b = svg ? svg.getBBox() : {width: 0, height: 0};
    const marks = svg ? svg.querySelectorAll('path, rect, use').length : 0;
    return f.id + ':' + (b.width > 50 && b.height > 50 && marks > 5 ? 'rendered' : 'blank');
  });
  const p = document.createElement('p'); p.id = 'render-check'; p.textContent = rows.join(' ');
  document.body.appendChild(p);
});
</script>"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is missing: scripts/setup.sh installs it (apt-get install chromium)"
    return exe


def test_html_report_renders_in_chromium(ws: WorkspaceContext, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "report.html"
    # the trials were run by a scripted agent standing in for the harness: build the report for it
    out.write_text(html(build_diff(ws, "gen-0000", "gen-0001", agent="better")))
    ws.store.close()
    cli_out = tmp_path / "cli.html"  # and the command writes the same kind of page
    r = CliRunner().invoke(app, ["-w", str(ws.ws.root), "diff", "gen-0000", "gen-0001", "--format", "html",
                                 "--out", str(cli_out)])
    assert r.exit_code == 0 and "gen-0001" in cli_out.read_text(), r.output
    page = out.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", page), "the report must not load anything from the network"
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", CHECK + "</body>"))
    profile = tmp_path / "chromium-profile"
    dom = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    check = re.search(r'<p id="render-check">([^<]*)</p>', dom.stdout)
    assert check, dom.stdout[-2000:]
    assert check.group(1).split() == ["chart-flips:rendered", "chart-families:rendered",
                                      "chart-attribution:rendered"]
    assert 'id="gen-a">gen-0000<' in dom.stdout and 'id="gen-b">gen-0001<' in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1200,2400", out.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000  # a page with charts, not a blank one
