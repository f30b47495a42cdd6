#!/bin/bash
# Verifier for fix-average: /app/average.py prints the mean of a number file with two decimals
# Checks content with python3 only and always writes /logs/verifier/reward.txt (1 or 0).
mkdir -p /logs/verifier
if python3 - <<'PY'
import sys
from pathlib import Path

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

def read(path):
    p = Path(path)
    if not p.is_file():
        fail(f"{path} does not exist or is not a regular file")
    return p.read_text(errors="replace")

import subprocess

def run(*args):
    """Runs the agent's script with `args`; its stdout, or a failure on error or hang."""
    try:
        p = subprocess.run(["python3", *args], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        fail(f"python3 {' '.join(args)} did not finish in 10 s")
    if p.returncode != 0:
        fail(f"python3 {' '.join(args)} exited {p.returncode}: {p.stderr[-500:]}")
    return p.stdout

import tempfile
cases = (("2\n4\n6\n", "4.00"), ("10\n", "10.00"), ("1\n2\n3\n4\n", "2.50"))
for content, want in cases:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(content)
    out = run("/app/average.py", f.name).strip()
    if out != want:
        fail(f"average of {content.split()} printed {out!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
