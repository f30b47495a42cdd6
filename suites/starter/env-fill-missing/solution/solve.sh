#!/bin/bash
set -e
cd /app
grep -E '^[A-Z_]+=' /app/.env.example | while IFS= read -r line; do
  key=${line%%=*}
  if ! grep -q "^$key=" /app/.env; then
    echo "$line" >> /app/.env
    echo "$key" >> /app/added.txt
  fi
done
