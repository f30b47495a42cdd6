#!/bin/bash
set -e
cd /app
cat /app/lists/*.txt | tr 'A-Z' 'a-z' | sort -u > /app/all_subscribers.txt
