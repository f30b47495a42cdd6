#!/bin/bash
# Verifier for mirror-dirs: /app/out mirrors the folders of /app/src with one empty .keep in each and no other file
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

dirs = ['', 'app', 'app/models', 'app/views', 'app/views/admin', 'lib', 'static', 'static/css', 'static/img']
src = {'/app/src/app/models/user.py': 'class User:\n    pass\n', '/app/src/app/views/home.py': "def home():\n    return 'home'\n", '/app/src/app/views/admin/panel.py': "def panel():\n    return 'admin'\n", '/app/src/lib/util.py': 'def noop():\n    pass\n', '/app/src/static/css/site.css': 'body { margin: 0; }\n', '/app/src/static/img/logo.txt': '(logo)\n', '/app/src/main.py': "print('main')\n"}

import os
for path, text in src.items():
    if read(path) != text:
        fail(f"{path} is missing or changed: /app/src must stay as it is")
root = Path("/app/out")
if not root.is_dir():
    fail("/app/out is not a directory")
got_dirs, got_files = [], []
for d, subdirs, files in os.walk(root):
    rel = os.path.relpath(d, root)
    got_dirs.append("" if rel == "." else rel)
    got_files += [os.path.join("" if rel == "." else rel, f) for f in files]
if sorted(got_dirs) != dirs:
    fail(f"/app/out has the folders {sorted(got_dirs)!r}, expected {dirs!r}")
want_files = sorted(os.path.join(d, ".keep") for d in dirs)
if sorted(got_files) != want_files:
    fail(f"/app/out holds the files {sorted(got_files)!r}, expected {want_files!r}")
for f in want_files:
    if (root / f).stat().st_size:
        fail(f"/app/out/{f} is not empty")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
