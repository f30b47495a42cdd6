#!/bin/bash
# Verifier for uppercase-file: /app/output.txt is /app/input.txt in uppercase
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

text = read("/app/output.txt")
want = 'PACK MY BOX WITH\nFIVE DOZEN LIQUOR JUGS.\nHOW VEXINGLY QUICK, DAFT ZEBRAS JUMP!\n'
if text.rstrip("\n") != want.rstrip("\n"):
    fail(f"/app/output.txt holds {text!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
