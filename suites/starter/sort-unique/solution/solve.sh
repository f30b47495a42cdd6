#!/bin/bash
set -e
cd /app
sort -u /app/fruits.txt > /app/unique.txt
