#!/bin/bash
set -e
cd /app
echo "gamma" >> /app/notes.txt
