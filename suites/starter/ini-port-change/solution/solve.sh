#!/bin/bash
set -e
cd /app
awk -F' = ' '/^\[/ { s = $0 } s == "[server]" && $1 == "port" { print $2 }' /app/settings.ini > /app/old_port.txt
sed -i '/^\[server\]/,/^\[/ s/^port = .*/port = 9090/' /app/settings.ini
