#!/bin/bash
# Verifier for latest-release-link: /app/current is a symlink to /app/releases/1.10.2 and /app/current_version.txt holds 1.10.2
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

import os
link = Path("/app/current")
if not link.is_symlink():
    fail("/app/current is not a symbolic link")
target = os.path.realpath(link)
if target != "/app/releases/1.10.2":
    fail(f"/app/current points to {target}, expected /app/releases/1.10.2")
v = read("/app/current_version.txt").strip()
if v != "1.10.2":
    fail(f"/app/current_version.txt holds {v!r}, expected 1.10.2")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
