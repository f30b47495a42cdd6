#!/bin/bash
# Verifier for rename-file: /app/draft.txt moved to /app/final.txt with its content unchanged
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

if Path("/app/draft.txt").exists():
    fail("/app/draft.txt still exists")
text = read("/app/final.txt")
if text != 'Monthly summary\nvisits: 3400\nsignups: 120\n':
    fail(f"/app/final.txt holds {text!r}, expected the original draft")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
