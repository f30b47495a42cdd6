#!/bin/bash
set -e
cd /app
tail -n +2 /app/cities.csv | sort -t, -k3 -n -r | head -n 1 | cut -d, -f1 > /app/answer.txt
