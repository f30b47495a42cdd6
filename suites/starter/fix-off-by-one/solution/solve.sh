#!/bin/bash
set -e
cd /app
sed -i 's/range(1, limit)/range(1, limit + 1)/' /app/count.py
