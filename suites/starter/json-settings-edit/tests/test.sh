#!/bin/bash
# Verifier for json-settings-edit: /app/service.json has debug off, two more workers, log level warning and nothing else changed
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

want = {'name': 'billing-api', 'debug': False, 'workers': 5, 'log_level': 'warning', 'database': {'host': 'db.internal', 'port': 5432, 'pool': 10}, 'features': ['invoices', 'refunds'], 'timeout_s': 30}

import json
try:
    got = json.loads(read("/app/service.json"))
except ValueError as e:
    fail(f"/app/service.json is not valid JSON: {e}")
if got != want:
    fail(f"/app/service.json holds {got!r}, expected {want!r}")
if got["debug"] is not False:
    fail("debug must be the JSON value false")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
