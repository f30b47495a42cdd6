#!/bin/bash
# Verifier for duplicate-files: only the alphabetically first file of each identical group is left in /app/scans; the rest are listed
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

kept = {'contract.txt': 'contract between A and B\n', 'notes.txt': 'call the landlord\n', 'photo1.dat': 'photo one\n', 'photo2.dat': 'photo two\n', 'receipt.txt': 'receipt 2024-03-02 total 41.90\n'}
removed = ['draft-contract.txt', 'old-contract.txt', 'scan-0042.txt']

d = Path("/app/scans")
got = sorted(p.name for p in d.iterdir())
if got != sorted(kept):
    fail(f"/app/scans holds {got!r}, expected {sorted(kept)!r}")
for name, text in kept.items():
    if read(d / name) != text:
        fail(f"/app/scans/{name} was changed")
names = read("/app/removed_duplicates.txt").split()
if names != removed:
    fail(f"/app/removed_duplicates.txt lists {names!r}, expected {removed!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
