#!/bin/bash
# Verifier for log-time-window: /app/window.log holds the 14:xx lines of /app/worker.log and /app/window_errors.txt their ERROR count
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

want = ['2024-03-14 14:00:00 INFO batch 41 started', '2024-03-14 14:12:30 ERROR batch 41 item 7 failed validation', '2024-03-14 14:20:11 WARN retrying item 7', '2024-03-14 14:31:45 INFO batch 41 finished', '2024-03-14 14:45:00 ERROR disk usage above 90%', '2024-03-14 14:50:10 INFO previous ERROR cleared', '2024-03-14 14:59:58 INFO heartbeat']
errors = '2'

got = read("/app/window.log").splitlines()
if got != want:
    fail(f"/app/window.log lines are {got!r}, expected {want!r}")
n = read("/app/window_errors.txt").strip()
if n != errors:
    fail(f"/app/window_errors.txt holds {n!r}, expected {errors}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
