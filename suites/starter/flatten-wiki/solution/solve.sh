#!/bin/bash
set -e
cd /app
mkdir -p /app/flat
cd /app/wiki
find . -type f -name '*.md' | sed 's|^\./||' | while read -r p; do cp "$p" "/app/flat/$(echo "$p" | tr / -)"; done
