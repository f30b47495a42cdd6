#!/bin/bash
set -e
cd /app
mkdir -p /app/export
tar -xzf /app/incoming/q3-export.tar.gz -C /app/export
find /app/export -type f -name '*.csv' | wc -l > /app/csv_count.txt
