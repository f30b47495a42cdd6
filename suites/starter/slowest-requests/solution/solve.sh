#!/bin/bash
set -e
cd /app
awk '{ t = $NF; sub(/ms$/, "", t); print t "\t" $0 }' /app/access.log | sort -t$'\t' -k1,1 -rn | head -n 3 \
  | cut -f2- > /app/slowest.txt
