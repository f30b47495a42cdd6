"""A second store opened on the same SQLite file in one process must not drop the first one's locks.

POSIX advisory locks belong to the process, and closing *any* descriptor of a file releases all of them.
The store's damage check reads the file's header; done with a plain `open()` while this process already
held the database through SQLite, it dropped SQLite's locks, and another process (`rsi jobs list`, the
sqlite3 shell) closing its connection then found itself the last one, checkpointed and deleted the -wal
file the running job was still writing into: everything after was lost. `rsi update` opens its own store
inside a running cycle, so this happened in the demo.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rsi.store.repo import Store

READER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("SELECT count(*) FROM configs").fetchone()[0])
c.close()
"""


def _count(db: Path) -> int:
    out = subprocess.run([sys.executable, "-c", READER, str(db)], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_a_second_store_in_the_process_keeps_the_first_ones_wal_alive(tmp_path: Path) -> None:
    db = tmp_path / "rsi.db"
    first = Store.for_path(db)
    try:
        first.put_config("a" * 64, "one", "name: one\n")
        with first.engine.connect():  # a connection the first store holds open, as a running job does
            second = Store.for_path(db)  # e.g. `rsi update` inside a cycle
            second.close()
            assert _count(db) == 1  # another process reads and closes: it must not take the -wal away
            first.put_config("b" * 64, "two", "name: two\n")
            assert Path(f"{db}-wal").exists()
            assert _count(db) == 2  # what the first store wrote after is visible to everyone
    finally:
        first.close()
    assert _count(db) == 2
