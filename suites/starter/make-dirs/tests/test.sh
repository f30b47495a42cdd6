#!/bin/bash
# Verifier for make-dirs: the /app/project tree exists and README.md holds '# project'
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

for sub in ("src", "tests", "docs"):
    p = Path("/app/project") / sub
    if not p.is_dir():
        fail(f"{p} is not a directory")
text = read("/app/project/README.md")
if text not in ("# project", "# project\n"):
    fail(f"/app/project/README.md holds {text!r}, expected '# project'")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
