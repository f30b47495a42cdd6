#!/bin/bash
# Verifier for csv-sum: /app/answer.txt holds the sum of the quantity column
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

text = read("/app/answer.txt").strip()
try:
    got = float(text)
except ValueError:
    fail(f"/app/answer.txt holds {text!r}, not a number")
if got != 37:
    fail(f"/app/answer.txt holds {text!r}, expected 37")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
