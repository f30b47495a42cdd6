#!/bin/bash
# Verifier for flatten-wiki: /app/flat holds each .md page of /app/wiki named by its path with dashes; the wiki is unchanged
# Checks content with python3 only and always writes /logs/verifier/reward.txt (1 or 0).
mkdir -p /logs/verifier
if python3 - <<'PY'
import sys
from pathlib import Path

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

def read(path):
    p = Path(path)
    if not p.is_file():
        fail(f"{path} does not exist or is not a regular file")
    return p.read_text(errors="replace")

flat = {'index.md': '# Home\n', 'faq.md': '# FAQ\n', 'guide-install.md': '# Install\n', 'guide-usage.md': '# Usage\n', 'guide-advanced-tuning.md': '# Tuning\n', 'api-rest.md': '# REST API\n'}
wiki = {'/app/wiki/index.md': '# Home\n', '/app/wiki/faq.md': '# FAQ\n', '/app/wiki/guide/install.md': '# Install\n', '/app/wiki/guide/usage.md': '# Usage\n', '/app/wiki/guide/advanced/tuning.md': '# Tuning\n', '/app/wiki/api/rest.md': '# REST API\n', '/app/wiki/api/openapi.yaml': 'openapi: 3.0.0\n', '/app/wiki/assets/logo.txt': '(logo)\n'}

for path, text in wiki.items():
    if read(path) != text:
        fail(f"{path} is missing or changed: the wiki must stay as it is")
d = Path("/app/flat")
if not d.is_dir():
    fail("/app/flat is not a directory")
got = sorted(p.name for p in d.iterdir())
if got != sorted(flat):
    fail(f"/app/flat holds {got!r}, expected {sorted(flat)!r}")
for name, text in flat.items():
    if read(d / name) != text:
        fail(f"/app/flat/{name} is not a copy of its page")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
