#!/bin/bash
set -e
cd /app
cd /app/photos
for f in *; do
  n=$(printf '%s' "$f" | tr ' ' '_' | tr 'A-Z' 'a-z')
  [ "$f" = "$n" ] || mv "$f" "$n"
done
