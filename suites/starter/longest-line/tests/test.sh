#!/bin/bash
# Verifier for longest-line: /app/longest.txt holds the line of /app/speech.txt with the most words and /app/longest_number.txt its number
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

line = 'Every child in this town can walk in and borrow a book, a map or a song for free.'
number = '6'

got = read("/app/longest.txt").rstrip("\n")
if got != line:
    fail(f"/app/longest.txt holds {got!r}, expected {line!r}")
n = read("/app/longest_number.txt").strip()
if n != number:
    fail(f"/app/longest_number.txt holds {n!r}, expected {number}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
