"""Choosing the embedded server's engine: by name, by environment, or auto with a one-line reason to fall back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rsi.core.errors import RsiError
from rsi.models.server import engines
from rsi.models.server.engines import choose_engine, engine_kind


def test_the_name_wins_over_the_environment_and_auto_is_the_default() -> None:
    assert engine_kind(None, env={}) == "auto"
    assert engine_kind(None, env={"RSI_MODEL_ENGINE": "torch"}) == "torch"
    assert engine_kind("LLAMA", env={"RSI_MODEL_ENGINE": "torch"}) == "llama"


def test_an_unknown_engine_names_where_it_came_from_and_the_known_ones() -> None:
    with pytest.raises(RsiError, match=r"--engine: unknown engine 'vllm'; known: auto, torch, llama"):
        engine_kind("vllm", env={})
    with pytest.raises(RsiError, match=r"RSI_MODEL_ENGINE: unknown engine 'gpu'"):
        engine_kind(None, env={"RSI_MODEL_ENGINE": "gpu"})


def test_a_named_kind_is_never_switched() -> None:
    assert choose_engine("torch", None) == ("torch", None)
    assert choose_engine("llama", "/some/hf-dir") == ("llama", None)  # the engine itself refuses it, loudly


def test_auto_serves_a_transformers_directory_with_torch_and_says_why(tmp_path: Path) -> None:
    kind, why = choose_engine("auto", str(tmp_path))
    assert kind == "torch" and why is not None and "GGUF" in why


def test_auto_falls_back_to_torch_where_llama_cpp_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now raises ImportError
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    kind, why = choose_engine("auto", str(gguf))
    assert kind == "torch" and why is not None and "llama-cpp-python" in why and "setup.sh" in why


def test_llama_without_llama_cpp_is_an_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # the engine module imports torch for sampling
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(RsiError, match=r"--engine llama: .*setup.sh"):
        engines.make_engine("llama", None, served_name=None, sizing=None)


def test_serve_refuses_a_torch_only_setting_on_the_llama_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rsi.cli.app import app

    monkeypatch.setattr("rsi.models.embedded.watch_parent", lambda: None)
    r = CliRunner().invoke(app, ["model", "serve", "--engine", "llama", "--kernels", "int8", "--dtype", "bfloat16"])
    assert r.exit_code == 2
    assert "--dtype, --kernels: only the torch engine has this setting; add --engine torch" in r.output
    r = CliRunner().invoke(app, ["model", "serve", "--engine", "tpu"])
    assert r.exit_code == 2 and "--engine: unknown engine 'tpu'; known: auto, torch, llama" in r.output
