#!/bin/bash
set -e
cd /app
echo "third line" >> /app/notes.txt
