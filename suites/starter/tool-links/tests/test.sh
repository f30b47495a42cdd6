#!/bin/bash
# Verifier for tool-links: /app/bin holds a symlink per /app/tools/*.sh without the extension and the scripts are executable
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

tools = {'backup.sh': '#!/bin/bash\necho backing up\n', 'deploy.sh': '#!/bin/bash\necho deploying\n', 'rotate-logs.sh': '#!/bin/bash\necho rotating\n', 'helpers.txt': 'backup before deploy\n'}

import os
want = sorted(n[:-3] for n in tools if n.endswith(".sh"))
got = sorted(p.name for p in Path("/app/bin").iterdir())
if got != want:
    fail(f"/app/bin holds {got!r}, expected {want!r}")
for name in want:
    link = Path("/app/bin") / name
    if not link.is_symlink():
        fail(f"{link} is not a symbolic link")
    if os.path.realpath(link) != f"/app/tools/{name}.sh":
        fail(f"{link} points to {os.path.realpath(link)}, expected /app/tools/{name}.sh")
for name, text in tools.items():
    p = Path("/app/tools") / name
    if read(p) != text:
        fail(f"{p} was changed")
    if name.endswith(".sh") and not p.stat().st_mode & 0o100:
        fail(f"{p} is not executable")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
