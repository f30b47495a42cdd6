#!/bin/bash
set -e
cd /app
cd /app/downloads
sha256sum -c SHA256SUMS 2>/dev/null | grep ': FAILED$' | sed 's/: FAILED$//' | sort > /app/bad_downloads.txt || true
xargs -I{} mv {} /app/quarantine/ < /app/bad_downloads.txt
