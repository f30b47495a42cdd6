#!/bin/bash
set -e
cd /app
awk '{ if (NF > max) { max = NF; n = NR; line = $0 } } END { print line > "/app/longest.txt"; print n > "/app/longest_number.txt" }' /app/speech.txt
