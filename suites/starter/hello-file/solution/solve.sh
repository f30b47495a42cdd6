#!/bin/bash
set -e
cd /app
echo "hello world" > /app/hello.txt
