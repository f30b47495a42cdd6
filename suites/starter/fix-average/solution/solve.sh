#!/bin/bash
set -e
cd /app
sed -i 's/len(numbers) - 1/len(numbers)/' /app/average.py
