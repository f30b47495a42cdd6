#!/bin/bash
# Verifier for grep-errors: /app/errors.txt holds exactly the ERROR lines of /app/app.log, in order
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

lines = read("/app/errors.txt").splitlines()
want = ['2024-06-12 08:00:04 ERROR cache server refused connection', '2024-06-12 08:02:11 ERROR job 17 crashed: out of memory', '2024-06-12 08:04:02 ERROR lost lease on queue', '2024-06-12 08:04:05 ERROR flush incomplete']
if lines != want:
    fail(f"/app/errors.txt lines are {lines!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
