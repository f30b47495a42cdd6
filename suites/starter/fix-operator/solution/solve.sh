#!/bin/bash
set -e
cd /app
sed -i 's/return x - y/return x + y/' /app/add.py
