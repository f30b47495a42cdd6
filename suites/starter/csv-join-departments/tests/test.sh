#!/bin/bash
# Verifier for csv-join-departments: /app/staff.csv lists each person with the name of their department
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

want = ['name,department', 'Grace Hopper,Compilers', 'Alan Turing,Engineering', 'Ada Lovelace,Compilers', 'Linus Torvalds,Operating Systems', 'Barbara Liskov,Research', 'Ken Thompson,Operating Systems', 'Margaret Hamilton,Engineering']

got = read("/app/staff.csv").splitlines()
if got != want:
    fail(f"/app/staff.csv lines are {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
