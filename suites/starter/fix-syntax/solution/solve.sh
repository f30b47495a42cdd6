#!/bin/bash
set -e
cd /app
cat > /app/greet.py <<'EOF'
import sys

name = sys.argv[1] if len(sys.argv) > 1 else "World"
print("Hello, " + name + "!")
EOF
