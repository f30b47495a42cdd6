"""Fixtures for every test: an isolated RSI_HOME, and a fresh workspace on demand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.loop.context import WorkspaceContext
from rsi.sandbox.fake import FakeSandboxProvider


@pytest.fixture(autouse=True)
def _isolated_rsi_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point RSI_HOME at a tmp dir and drop RSI_DATABASE_URL, so no test touches a real workspace or DB."""
    home = tmp_path_factory.mktemp("rsi-home")
    monkeypatch.setenv("RSI_HOME", str(home))
    monkeypatch.delenv("RSI_DATABASE_URL", raising=False)
    return home


@pytest.fixture(autouse=True)
def _registries_as_they_were() -> Iterator[None]:
    """Undo what a test registered: a fake generator or agent added by one test must not show up in another's
    listing of every registered provider (providers the package itself loads lazily stay)."""
    from rsi.core.registry import Registry

    before = [(r, r.items()) for r in Registry.instances]
    yield
    for reg, old in before:
        for name, factory in reg.items().items():
            if name in old:
                if old[name] is not factory:
                    reg.add(name, old[name])
            elif not getattr(factory, "__module__", "").startswith("rsi."):
                reg.remove(name)


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[WorkspaceContext]:
    """`rsi init` (without the starter tasks, and with no regression suite in its contract) at tmp_path/ws, opened."""
    from rsi.loop.init import init_workspace

    root = tmp_path / "ws"
    init_workspace(root, starter_tasks=False)
    # no regression suite: unit tests measure their own tasks (tests of the suite gate name theirs)
    contract = root / "contracts" / "hcp-1.0.yaml"
    contract.write_text(contract.read_text().replace("suites: [suites/starter]", "suites: []"))
    ctx = WorkspaceContext.open(root)
    yield ctx
    if "store" in ctx.__dict__:
        ctx.store.close()


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[FakeSandboxProvider]:
    """The fake sandbox provider, checked afterwards for sandboxes left running (a test module may define its own)."""
    p = FakeSandboxProvider(tmp_path / "fake")
    yield p
    assert not p.live, f"sandboxes left running: {list(p.live)}"


@pytest.fixture(scope="session")
def cycle_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with one finished cycle on fakes (no Docker, no model; tests/viewkit.py), built once per session:
    `rsi view`'s fixture. Read it only (the viewer's tests open it read-only)."""
    from tests.viewkit import build_cycle_workspace

    return build_cycle_workspace(tmp_path_factory.mktemp("view-cycle"))
