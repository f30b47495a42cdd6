#!/bin/bash
set -e
cd /app
for f in /app/tools/*.sh; do
  chmod +x "$f"
  ln -s "$f" "/app/bin/$(basename "$f" .sh)"
done
