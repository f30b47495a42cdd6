#!/bin/bash
set -e
cd /app
awk '$2 >= "14:00:00" && $2 < "15:00:00"' /app/worker.log > /app/window.log
awk '$3 == "ERROR"' /app/window.log | wc -l > /app/window_errors.txt
