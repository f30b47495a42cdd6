#!/bin/bash
# Verifier for hello-file: /app/hello.txt holds exactly 'hello world'
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

text = read("/app/hello.txt")
if text not in ("hello there", "hello there\n"):
    fail(f"/app/hello.txt holds {text!r}, expected 'hello there'")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
