#!/bin/bash
# Verifier for env-fill-missing: /app/.env gains the template's missing settings with their values, existing ones kept; /app/added.txt names them
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

want = {'APP_NAME': 'orders', 'DATABASE_URL': 'postgres://orders@db:5432/orders', 'SECRET_KEY': 's3cr3t-from-vault', 'LOG_LEVEL': 'debug', 'CACHE_TTL': '300', 'MAX_UPLOAD_MB': '25', 'SENTRY_DSN': '', 'TIMEZONE': 'UTC'}
added = ['CACHE_TTL', 'MAX_UPLOAD_MB', 'SENTRY_DSN', 'TIMEZONE']

got = {}
for line in read("/app/.env").splitlines():
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    if "=" not in line:
        fail(f"/app/.env has a line that is not KEY=VALUE: {line!r}")
    key, value = line.split("=", 1)
    if key in got:
        fail(f"/app/.env sets {key} twice")
    got[key] = value
if got != want:
    fail(f"/app/.env sets {got!r}, expected {want!r}")
names = read("/app/added.txt").split()
if names != added:
    fail(f"/app/added.txt lists {names!r}, expected {added!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
