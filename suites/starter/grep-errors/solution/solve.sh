#!/bin/bash
set -e
cd /app
grep 'ERROR' /app/app.log > /app/errors.txt
