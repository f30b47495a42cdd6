#!/bin/bash
# Verifier for longest-job: /app/longest.txt names the longest job of /app/jobs.log and its duration in seconds
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

got = read("/app/longest.txt").split()
if got != ["backup", "6605"]:
    fail(f"/app/longest.txt holds {got!r}, expected 'backup 6605'")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
