#!/bin/bash
set -e
cd /app
expand -t 4 /app/tally.py | sed 's/[[:space:]]*$//' > /tmp/tally.py
cat /tmp/tally.py > /app/tally.py
