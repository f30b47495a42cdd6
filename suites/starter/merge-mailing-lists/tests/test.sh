#!/bin/bash
# Verifier for merge-mailing-lists: /app/all_subscribers.txt holds the lower-cased union of both lists, sorted, each address once
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

want = ['alice@example.com', 'bob.smith@example.com', 'carol@shop.example', 'dave@example.org', 'erin@example.org', 'frank@example.net', 'grace@shop.example', 'heidi@example.net']

got = read("/app/all_subscribers.txt").splitlines()
if got != want:
    fail(f"/app/all_subscribers.txt lines are {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
