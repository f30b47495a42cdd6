#!/bin/bash
# Verifier for slowest-requests: /app/slowest.txt holds the three slowest lines of /app/access.log, slowest first
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

want = ['2024-05-03T10:14:59Z POST /api/checkout 200 2210ms', '2024-05-03T10:22:07Z POST /api/reports 202 1890ms', '2024-05-03T10:04:34Z POST /api/orders 201 1204ms']

got = read("/app/slowest.txt").splitlines()
if got != want:
    fail(f"/app/slowest.txt lines are {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
