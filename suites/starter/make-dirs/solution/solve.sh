#!/bin/bash
set -e
cd /app
mkdir -p /app/project/src /app/project/tests /app/project/docs
echo "# project" > /app/project/README.md
