#!/bin/bash
set -e
cd /app
mkdir -p /app/webapp/static /app/webapp/templates /app/webapp/docs
echo "# webapp" > /app/webapp/README.md
