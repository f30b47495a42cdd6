#!/bin/bash
set -e
cd /app
for f in /app/scripts/*; do
  if head -n 1 "$f" | grep -q '^#!'; then chmod a+x "$f"; else chmod a-x "$f"; fi
done
