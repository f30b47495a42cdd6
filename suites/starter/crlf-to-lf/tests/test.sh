#!/bin/bash
# Verifier for crlf-to-lf: no file in /app/import has CR LF endings any more and /app/converted.txt names those that had
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

files = {'customers.csv': 'id,name\n1,Ana\n2,Ben\n', 'orders.csv': 'id,total\n7,12.50\n8,3.20\n', 'products.csv': 'sku,price\nA1,4.00\nB2,9.90\n', 'readme.txt': 'Exported from the shop on Friday.\nOne file per table.\n'}
want = ['customers.csv', 'products.csv', 'readme.txt']

d = Path("/app/import")
got = sorted(p.name for p in d.iterdir())
if got != sorted(files):
    fail(f"/app/import holds {got!r}, expected {sorted(files)!r}")
for name, text in files.items():
    data = (d / name).read_bytes()
    if data != text.encode():
        fail(f"/app/import/{name} holds {data!r}, expected {text.encode()!r}")
names = read("/app/converted.txt").split()
if names != want:
    fail(f"/app/converted.txt lists {names!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
