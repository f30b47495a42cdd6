#!/bin/bash
set -e
cd /app
python3 -c 'import json; print(sum(o["amount"] for o in json.load(open("/app/orders.json")) if o["status"] == "paid"))' > /app/answer.txt
