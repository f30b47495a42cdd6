"""Sandboxes: where agents act and verifiers grade. See base.py for the protocol."""

from rsi.sandbox.base import (
    LABEL_JOB,
    LABEL_KIND,
    LABEL_TRIAL,
    BuildError,
    ExecResult,
    GcReport,
    ImageRef,
    Sandbox,
    SandboxError,
    SandboxProvider,
    SandboxSpec,
)
from rsi.sandbox.registry import SANDBOX_PROVIDERS, get_provider

__all__ = [
    "LABEL_JOB",
    "LABEL_KIND",
    "LABEL_TRIAL",
    "SANDBOX_PROVIDERS",
    "BuildError",
    "ExecResult",
    "GcReport",
    "ImageRef",
    "Sandbox",
    "SandboxError",
    "SandboxProvider",
    "SandboxSpec",
    "get_provider",
]
