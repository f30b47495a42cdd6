#!/bin/bash
# Verifier for tabs-to-spaces: /app/tally.py is indented with four spaces, has no trailing whitespace and still works
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

want = 'import sys\n\n\ndef tally(path):\n    counts = {}\n    with open(path) as f:\n        for line in f:\n            word = line.strip()\n            if not word:\n                continue\n            counts[word] = counts.get(word, 0) + 1\n    return counts\n\n\nif __name__ == "__main__":\n    for word, n in sorted(tally(sys.argv[1]).items()):\n        print(f"{word} {n}")\n'

import subprocess
import tempfile
text = read("/app/tally.py")
if "\t" in text:
    fail("/app/tally.py still contains tabs")
bad = [i + 1 for i, ln in enumerate(text.split("\n")) if ln != ln.rstrip()]
if bad:
    fail(f"/app/tally.py lines {bad} end in whitespace")
if text.rstrip("\n") != want.rstrip("\n"):
    fail(f"/app/tally.py holds {text!r}, expected {want!r}")
with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write("b\na\nb\n")
p = subprocess.run(["python3", "/app/tally.py", f.name], capture_output=True, text=True, timeout=10)
if p.returncode != 0 or p.stdout != "a 1\nb 2\n":
    fail(f"python3 /app/tally.py printed {p.stdout!r} (exit {p.returncode}), expected 'a 1' and 'b 2'")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
