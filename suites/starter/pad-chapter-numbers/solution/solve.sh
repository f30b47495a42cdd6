#!/bin/bash
set -e
cd /app
cd /app/book
for n in $(seq 1 9); do mv "chapter$n.md" "chapter0$n.md"; done
cat /app/book/chapter*.md > /app/book.md
