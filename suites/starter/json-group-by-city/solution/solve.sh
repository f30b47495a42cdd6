#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import json
out = {}
for c in json.load(open("/app/customers.json")):
    if c["active"]:
        out.setdefault(c["address"]["city"], []).append(c["name"])
json.dump({k: sorted(v) for k, v in out.items()}, open("/app/by_city.json", "w"), indent=2)
EOF
