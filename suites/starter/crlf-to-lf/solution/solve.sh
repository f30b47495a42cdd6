#!/bin/bash
set -e
cd /app
cd /app/import
grep -l $'\r' * | sort > /app/converted.txt
xargs sed -i 's/\r$//' < /app/converted.txt
