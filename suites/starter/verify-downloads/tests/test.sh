#!/bin/bash
# Verifier for verify-downloads: the files failing SHA256SUMS are moved to /app/quarantine and listed in /app/bad_downloads.txt
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

files = {'firmware-2.1.bin': 'firmware image 2.1\n', 'manual.pdf': '%PDF-1.4 user manual\n', 'drivers.zip': 'PK drivers bund\x00\n', 'release-notes.txt': '2.1: faster boot\n', 'tools.tar': 'tools archiv3\n'}
bad = ['drivers.zip', 'tools.tar']
sums = '4eb44440dd03b18d7342cf6fa1f680bcd3a00b9f57f53efe49ea4bfda2506a85  drivers.zip\ne2db8b36c3dc0377a29683fef8a51428e826db7189271227ba6f1ada205052a0  firmware-2.1.bin\nf874aa84ad5c3ee740ada66d5df725cd1fa6b6e5ee52f043a2fecf4790d10653  manual.pdf\n6d5817f1b96c07e2feb5f60d26c6665e37e456cb496eb5c491d9b8150cbe29b8  release-notes.txt\ncaddea58ffbf26ced0160ba3853916d7ca2bc9865c6971b2a727492d86139887  tools.tar\n'

if read("/app/downloads/SHA256SUMS") != sums:
    fail("/app/downloads/SHA256SUMS is missing or changed")
for name, text in files.items():
    where, other = Path("/app/downloads"), Path("/app/quarantine")
    if name in bad:
        where, other = other, where
    if read(where / name) != text:
        fail(f"{where / name} does not hold the downloaded file")
    if (other / name).exists():
        fail(f"{other / name} should not exist")
got = read("/app/bad_downloads.txt").split()
if got != bad:
    fail(f"/app/bad_downloads.txt lists {got!r}, expected {bad!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
