#!/bin/bash
# Verifier for fix-off-by-one: /app/count.py prints 1..N inclusive
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

for n in (5, 1, 8):
    out = run("/app/count.py", str(n)).split()
    want = [str(i) for i in range(1, n + 1)]
    if out != want:
        fail(f"python3 /app/count.py {n} printed {out!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
