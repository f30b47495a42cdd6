#!/bin/bash
set -e
cd /app
tr 'a-z' 'A-Z' < /app/input.txt > /app/output.txt
