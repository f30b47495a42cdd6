#!/bin/bash
set -e
cd /app
awk '$9 ~ /^5[0-9][0-9]$/ { print $7 }' /app/web.log | sort | uniq -c | sort -rn \
  | awk '{ print $1 " " $2 }' > /app/errors_by_path.txt
