#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import csv
names = {r["dept_id"]: r["dept_name"] for r in csv.DictReader(open("/app/hr/departments.csv"))}
with open("/app/staff.csv", "w") as out:
    out.write("name,department\n")
    for r in csv.DictReader(open("/app/hr/people.csv")):
        out.write(f"{r['name']},{names[r['dept_id']]}\n")
EOF
