#!/bin/bash
set -e
cd /app
mv /app/draft.txt /app/final.txt
