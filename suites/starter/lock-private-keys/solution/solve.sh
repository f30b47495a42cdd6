#!/bin/bash
set -e
cd /app
grep -rl 'PRIVATE KEY' /app/keys | sort > /app/locked.txt
xargs chmod 600 < /app/locked.txt
