#!/bin/bash
set -e
cd /app
cd /app/essays
for f in *.txt; do [ "$(wc -w < "$f")" -lt 120 ] && echo "$f"; done | sort > /app/too_short.txt
xargs -I{} mv {} returned/ < /app/too_short.txt
