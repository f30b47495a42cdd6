"""The README's picture: `rsi view` over a workspace with a finished cycle, in Chromium, saved as a PNG.

    python3 scripts/screenshot.py rsi-demo                     # after `rsi demo`
    python3 scripts/screenshot.py rsi-demo --page /generations --out docs/assets/rsi-view.png

Starts `rsi view --port 0` on the workspace as a user does, opens the page in Debian's Chromium through Playwright
(launched by executable_path: no browser download) and writes the screenshot."""

from __future__ import annotations

import argparse
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspace", type=Path)
    ap.add_argument("--page", default="/", help="the viewer page to capture (default: the generations overview)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "rsi-view.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    a = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("chromium is missing: apt-get install chromium", file=sys.stderr)
        return 2
    proc = subprocess.Popen([sys.executable, "-m", "rsi", "-w", str(a.workspace), "view", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        if not select.select([proc.stdout], [], [], 120)[0]:
            print("rsi view printed no URL within 120 s", file=sys.stderr)
            return 1
        line = proc.stdout.readline()
        if "open http" not in line:
            print(line + (proc.stdout.read() if proc.poll() is not None else ""), file=sys.stderr)
            return 1
        url = line.split("open ", 1)[1].split()[0].rstrip("/")
        for _ in range(120):
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": a.width, "height": a.height})
            page.goto(url + a.page, wait_until="networkidle")
            a.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(a.out))
            browser.close()
        print(f"wrote {a.out}")
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
