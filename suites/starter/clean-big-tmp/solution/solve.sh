#!/bin/bash
set -e
cd /app
find /app/cache -type f -name '*.tmp' -size +1k -printf '%s\n' | awk '{ s += $1 } END { print s }' > /app/freed.txt
find /app/cache -type f -name '*.tmp' -size +1k -delete
