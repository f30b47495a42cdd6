#!/bin/bash
# Verifier for unpack-count-csv: the archive is unpacked under /app/export/q3 and /app/csv_count.txt holds its number of .csv files
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

members = {'q3/summary.csv': 'region,total\nnorth,18250\nsouth,14120\nwest,9980\n', 'q3/regions/north.csv': 'month,total\n2024-07,6100\n2024-08,5900\n2024-09,6250\n', 'q3/regions/south.csv': 'month,total\n2024-07,4480\n2024-08,4910\n2024-09,4730\n', 'q3/regions/notes.txt': 'West region numbers are still provisional.\n', 'q3/raw/2024-07.csv': 'day,orders\n1,112\n2,98\n3,131\n', 'q3/raw/2024-08.csv': 'day,orders\n1,120\n2,101\n3,95\n', 'q3/raw/readme.md': '# Raw exports\n\nOne file per month, one row per day.\n', 'q3/charts/legend.txt': 'blue: north\ngreen: south\ngrey: west\n', 'q3/charts/totals.csv.bak': 'region,total\nnorth,18000\n'}

for rel, text in members.items():
    got = read(f"/app/export/{rel}")
    if got != text:
        fail(f"/app/export/{rel} holds {got!r}, expected {text!r}")
n = read("/app/csv_count.txt").strip()
if n != "5":
    fail(f"/app/csv_count.txt holds {n!r}, expected 5")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
