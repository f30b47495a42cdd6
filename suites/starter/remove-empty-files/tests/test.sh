#!/bin/bash
# Verifier for remove-empty-files: the empty files of /app/project but __init__.py are gone and listed in /app/deleted.txt
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

files = {'/app/project/src/main.py': "from util import greet\n\nprint(greet('world'))\n", '/app/project/src/__init__.py': '', '/app/project/src/util.py': "def greet(name):\n    return f'hello {name}'\n", '/app/project/src/legacy.py': '', '/app/project/tests/__init__.py': '', '/app/project/tests/test_util.py': "from src.util import greet\n\n\ndef test_greet():\n    assert greet('a') == 'hello a'\n", '/app/project/docs/TODO': '', '/app/project/docs/index.md': '# project\n\nA tiny greeter.\n', '/app/project/output.log': ''}
gone = ['/app/project/docs/TODO', '/app/project/output.log', '/app/project/src/legacy.py']

for path, text in files.items():
    p = Path(path)
    if path in gone:
        if p.exists():
            fail(f"{path} is empty and should have been deleted")
    elif not p.is_file() or p.read_text() != text:
        fail(f"{path} should have been kept unchanged")
got = read("/app/deleted.txt").split()
if got != gone:
    fail(f"/app/deleted.txt lists {got!r}, expected {gone!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
