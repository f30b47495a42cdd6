#!/bin/bash
# Verifier for make-dirs: the /app/webapp tree exists and README.md holds '# webapp'
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

for sub in ("static", "templates", "docs"):
    p = Path("/app/webapp") / sub
    if not p.is_dir():
        fail(f"{p} is not a directory")
text = read("/app/webapp/README.md")
if text not in ("# webapp", "# webapp\n"):
    fail(f"/app/webapp/README.md holds {text!r}, expected '# webapp'")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
