#!/bin/bash
set -e
cd /app
cd /app/scans
sha256sum * | sort -k2 | awk 'seen[$1]++ { print $2 }' | sort > /app/removed_duplicates.txt
xargs rm -f < /app/removed_duplicates.txt
