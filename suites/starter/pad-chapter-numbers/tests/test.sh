#!/bin/bash
# Verifier for pad-chapter-numbers: /app/book holds chapter01.md to chapter12.md and /app/book.md joins them in order
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

chapters = {1: '# Chapter 1\n\nThe story goes on in part 1.\n', 2: '# Chapter 2\n\nThe story goes on in part 2.\n', 3: '# Chapter 3\n\nThe story goes on in part 3.\n', 4: '# Chapter 4\n\nThe story goes on in part 4.\n', 5: '# Chapter 5\n\nThe story goes on in part 5.\n', 6: '# Chapter 6\n\nThe story goes on in part 6.\n', 7: '# Chapter 7\n\nThe story goes on in part 7.\n', 8: '# Chapter 8\n\nThe story goes on in part 8.\n', 9: '# Chapter 9\n\nThe story goes on in part 9.\n', 10: '# Chapter 10\n\nThe story goes on in part 10.\n', 11: '# Chapter 11\n\nThe story goes on in part 11.\n', 12: '# Chapter 12\n\nThe story goes on in part 12.\n'}

d = Path("/app/book")
want = sorted(f"chapter{n:02d}.md" for n in chapters)
got = sorted(p.name for p in d.iterdir())
if got != want:
    fail(f"/app/book holds {got!r}, expected {want!r}")
for n, text in chapters.items():
    if read(d / f"chapter{n:02d}.md") != text:
        fail(f"/app/book/chapter{n:02d}.md does not hold chapter {n}")
book = read("/app/book.md")
if book != "".join(chapters[n] for n in sorted(chapters)):
    fail("/app/book.md is not the chapters joined in order")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
