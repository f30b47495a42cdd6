#!/bin/bash
# Verifier for ini-port-change: the [server] port in /app/settings.ini is 9090, nothing else changed, and /app/old_port.txt holds 8080
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

original = '[server]\nhost = 0.0.0.0\nport = 8080\nworkers = 4\n\n[database]\nhost = db.internal\nport = 5432\nname = shop\n\n[metrics]\nenabled = true\nport = 9100\n'

import configparser
want = configparser.ConfigParser()
want.read_string(original)
want["server"]["port"] = "9090"
got = configparser.ConfigParser()
try:
    got.read_string(read("/app/settings.ini"))
except configparser.Error as e:
    fail(f"/app/settings.ini does not parse: {e}")
as_dict = lambda c: {s: dict(c[s]) for s in c.sections()}
if as_dict(got) != as_dict(want):
    fail(f"/app/settings.ini holds {as_dict(got)!r}, expected {as_dict(want)!r}")
old = read("/app/old_port.txt").strip()
if old != "8080":
    fail(f"/app/old_port.txt holds {old!r}, expected 8080")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
