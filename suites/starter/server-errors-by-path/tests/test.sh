#!/bin/bash
# Verifier for server-errors-by-path: /app/errors_by_path.txt counts the 5xx responses of /app/web.log per path, most first
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

want = ['4 /api/cart', '3 /api/checkout', '2 /login', '1 /api/search']

got = [" ".join(ln.split()) for ln in read("/app/errors_by_path.txt").splitlines() if ln.strip()]
if got != want:
    fail(f"/app/errors_by_path.txt lines are {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
