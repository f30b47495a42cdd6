#!/bin/bash
set -e
cd /app
grep -vxF -f /app/replied.txt /app/invited.txt > /app/pending.txt
wc -l < /app/pending.txt > /app/pending_count.txt
