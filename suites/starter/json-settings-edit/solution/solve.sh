#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import json
s = json.load(open("/app/service.json"))
s["debug"] = False
s["workers"] += 2
s["log_level"] = "warning"
json.dump(s, open("/app/service.json", "w"), indent=2)
EOF
