"""Content digests: the identity of tasks, configs and environments.

Pure functions over bytes and mappings; callers read the files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON (sorted keys, no whitespace) so equal values hash equally."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def digest_obj(obj: Any) -> str:
    """sha256 of the canonical JSON form of a value."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def digest_files(files: Iterable[tuple[str, bytes]], *, salt: str = "") -> str:
    """sha256 over (relative path, content) pairs, order-independent.

    Each entry is framed with its length so no two different trees share a digest.
    """
    h = hashlib.sha256()
    h.update(salt.encode())
    for rel, data in sorted(files, key=lambda p: p[0]):
        h.update(f"\0{len(rel)}:{rel}\0{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()


def short(digest: str, n: int = 12) -> str:
    return digest[:n]


def merge_digests(parts: Mapping[str, str]) -> str:
    return digest_obj(dict(parts))
