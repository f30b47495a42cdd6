#!/bin/bash
# Verifier for restore-from-backup: /app/site.conf is the copy from the backup archive and /app/port.txt holds its port
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

good = '# shop front end\nserver_name = shop.example.org\nlisten = 8443\nroot = /var/www/shop\ntls_cert = /etc/ssl/shop.crt\nworkers = 4\n'

got = read("/app/site.conf")
if got != good:
    fail(f"/app/site.conf holds {got!r}, expected the backed-up copy {good!r}")
port = read("/app/port.txt").strip()
if port != "8443":
    fail(f"/app/port.txt holds {port!r}, expected 8443")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
