#!/bin/bash
set -e
cd /app
find /app/project -type f -empty ! -name __init__.py | sort > /app/deleted.txt
xargs rm -f < /app/deleted.txt
