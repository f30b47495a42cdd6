#!/bin/bash
# Verifier for json-group-by-city: /app/by_city.json maps each city to the sorted names of its active customers
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

want = {'Lyon': ['Ana Silva', 'Ben Carter', 'Maria Lopez'], 'Oslo': ['Nora Lind', 'Tom Berg'], 'Berlin': ['Chen Wei']}

import json
try:
    got = json.loads(read("/app/by_city.json"))
except ValueError as e:
    fail(f"/app/by_city.json is not valid JSON: {e}")
if got != want:
    fail(f"/app/by_city.json holds {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
