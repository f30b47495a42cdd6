#!/bin/bash
# Verifier for exec-by-shebang: files under /app/scripts with a #! line are executable by all, the others by none
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

files = {'deploy': ('#!/bin/bash\necho deploying\n', True), 'backup.sh': ('#!/bin/sh\ntar -czf /tmp/backup.tgz /srv/data\n', True), 'report.py': ("#!/usr/bin/env python3\nprint('report')\n", True), 'rotate': ('#!/bin/bash\nfor f in /var/log/shop/*.log; do mv "$f" "$f.1"; done\n', True), 'hosts.txt': ('web1 10.0.0.11\nweb2 10.0.0.12\n', False), 'notes.md': ('Run deploy after backup.sh, never before.\n', False), 'colors.csv': ('name,hex\nred,#ff0000\n', False)}

for name, (text, is_script) in files.items():
    p = Path("/app/scripts") / name
    if read(p) != text:
        fail(f"{p} was changed")
    bits = p.stat().st_mode & 0o111
    if is_script and bits != 0o111:
        fail(f"{p} is a script but its mode is {oct(p.stat().st_mode & 0o777)} (not executable by all)")
    if not is_script and bits:
        fail(f"{p} is data but its mode is {oct(p.stat().st_mode & 0o777)} (executable)")
extra = sorted(q.name for q in Path("/app/scripts").iterdir() if q.name not in files)
if extra:
    fail(f"unexpected files in /app/scripts: {extra}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
