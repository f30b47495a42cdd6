#!/bin/bash
# Verifier for sort-unique: /app/unique.txt holds the sorted distinct lines of /app/fruits.txt
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

lines = read("/app/unique.txt").splitlines()
want = ['date', 'grape', 'lime', 'olive', 'plum', 'quince']
if lines != want:
    fail(f"/app/unique.txt lines are {lines!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
