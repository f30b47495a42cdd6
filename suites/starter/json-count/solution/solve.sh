#!/bin/bash
set -e
cd /app
python3 -c 'import json; print(len(json.load(open("/app/users.json"))))' > /app/answer.txt
