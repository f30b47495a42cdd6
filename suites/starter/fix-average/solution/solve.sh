#!/bin/bash
set -e
cd /app
sed -i 's/len(vals) - 1/len(vals)/' /app/average.py
