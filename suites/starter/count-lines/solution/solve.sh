#!/bin/bash
set -e
cd /app
wc -l < /app/access.log | tr -d ' ' > /app/line_count.txt
