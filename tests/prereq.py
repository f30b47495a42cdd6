"""Integration prerequisites fail loudly: a missing Docker daemon or model is a failure with the fix,
not a skip, unless the user opts out with RSI_SKIP_INTEGRATION=1."""

from __future__ import annotations

import os

import pytest

SETUP_HINT = "run `scripts/setup.sh --dev` (installs and starts Docker, builds the base image, installs the model)"


def skip_integration() -> bool:
    return os.environ.get("RSI_SKIP_INTEGRATION") == "1"


def unavailable(reason: str) -> None:
    """Fail with `reason` and the fix; skip only when RSI_SKIP_INTEGRATION=1 says so."""
    if skip_integration():
        pytest.skip(f"{reason} (RSI_SKIP_INTEGRATION=1)")
    pytest.fail(f"integration prerequisite missing: {reason}; {SETUP_HINT}, "
                "or set RSI_SKIP_INTEGRATION=1 to skip the integration tests", pytrace=False)
