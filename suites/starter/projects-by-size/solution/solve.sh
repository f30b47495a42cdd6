#!/bin/bash
set -e
cd /app
du -sb /app/projects/*/ | sort -rn | awk '{ print $2 }' | xargs -n1 basename > /app/by_size.txt
mv "/app/projects/$(tail -n 1 /app/by_size.txt)" /app/attic/
