#!/bin/bash
# Verifier for photos-underscores: every name in /app/photos is lower case with underscores for spaces, contents kept
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

want = {'beach_day_01.jpg': 'beach-1 image bytes\n', 'beach_day_02.jpg': 'beach-2 image bytes\n', 'family_dinner.jpg': 'dinner image bytes\n', 'sunset_over_lake.jpeg': 'sunset image bytes\n', 'old_scan.png': 'scan image bytes\n'}

d = Path("/app/photos")
got = sorted(p.name for p in d.iterdir())
if got != sorted(want):
    fail(f"/app/photos holds {got!r}, expected {sorted(want)!r}")
for name, text in want.items():
    if read(d / name) != text:
        fail(f"/app/photos/{name} does not hold the photo's original content")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
