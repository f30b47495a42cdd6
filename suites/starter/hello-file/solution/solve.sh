#!/bin/bash
set -e
cd /app
echo "hello there" > /app/hello.txt
