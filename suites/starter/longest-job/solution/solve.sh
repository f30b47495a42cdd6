#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
from datetime import datetime
start, took = {}, {}
for line in open("/app/jobs.log"):
    day, clock, what, name = line.split()
    t = datetime.fromisoformat(f"{day} {clock}")
    if what == "start":
        start[name] = t
    else:
        took[name] = int((t - start[name]).total_seconds())
name = max(took, key=took.get)
open("/app/longest.txt", "w").write(f"{name} {took[name]}\n")
EOF
