#!/bin/bash
# Verifier for csv-reorder-list: /app/reorder.csv holds sku,name of the rows of /app/inventory.csv with quantity 0
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

want = ['sku,name', 'A-101,Floor lamp', 'B-201,Stool', 'C-301,Sticky notes', 'D-402,Mouse']

got = read("/app/reorder.csv").splitlines()
if got != want:
    fail(f"/app/reorder.csv lines are {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
