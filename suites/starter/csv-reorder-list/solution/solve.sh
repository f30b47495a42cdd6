#!/bin/bash
set -e
cd /app
awk -F, 'NR == 1 || $4 == 0 { print $1 "," $2 }' /app/inventory.csv > /app/reorder.csv
