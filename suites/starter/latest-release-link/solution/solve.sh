#!/bin/bash
set -e
cd /app
v=$(ls /app/releases | sort -V | tail -n 1)
ln -sfn "/app/releases/$v" /app/current
echo "$v" > /app/current_version.txt
