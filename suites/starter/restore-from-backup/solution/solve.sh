#!/bin/bash
set -e
cd /app
tar -xzf /app/backups/site-backup.tar.gz -O etc/site.conf > /app/site.conf
grep '^listen' /app/site.conf | sed 's/.*= *//' > /app/port.txt
