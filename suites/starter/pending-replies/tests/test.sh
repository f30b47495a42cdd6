#!/bin/bash
# Verifier for pending-replies: /app/pending.txt lists the invited people missing from /app/replied.txt and /app/pending_count.txt their number
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

want = ['Ann Lee', 'Carla Diaz', 'Finn Walsh', 'Gus Moreno', 'Ivan Petrov', 'Jo Kimball']

got = read("/app/pending.txt").splitlines()
if got != want:
    fail(f"/app/pending.txt lines are {got!r}, expected {want!r}")
n = read("/app/pending_count.txt").strip()
if n != str(len(want)):
    fail(f"/app/pending_count.txt holds {n!r}, expected {len(want)}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
