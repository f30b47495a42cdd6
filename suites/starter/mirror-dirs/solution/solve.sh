#!/bin/bash
set -e
cd /app
cd /app/src
find . -type d | while read -r d; do mkdir -p "/app/out/$d"; touch "/app/out/$d/.keep"; done
