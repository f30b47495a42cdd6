"""A PEFT LoRA converted for llama.cpp: tensor names, q/k row order, the scale, and what it refuses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from rsi.models.server.jobs import EngineError  # noqa: E402
from rsi.models.server.lora_gguf import convert_peft_adapter  # noqa: E402

CONFIG = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 16}
PREFIX = "base_model.model.model.layers"


def _adapter(d: Path, *, rank: int = 2, alpha: float = 4, **cfg: Any) -> dict[str, object]:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    t = {
        f"{PREFIX}.0.self_attn.q_proj.lora_A.weight": rng.normal(size=(rank, 16)).astype(np.float32),
        f"{PREFIX}.0.self_attn.q_proj.lora_B.weight": rng.normal(size=(16, rank)).astype(np.float32),
        f"{PREFIX}.0.self_attn.k_proj.lora_A.weight": rng.normal(size=(rank, 16)).astype(np.float32),
        f"{PREFIX}.0.self_attn.k_proj.lora_B.weight": rng.normal(size=(8, rank)).astype(np.float32),
        f"{PREFIX}.1.mlp.down_proj.lora_A.weight": rng.normal(size=(rank, 32)).astype(np.float32),
        f"{PREFIX}.1.mlp.down_proj.lora_B.weight": rng.normal(size=(16, rank)).astype(np.float32),
    }
    safetensors_numpy.save_file(t, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": alpha, **cfg}))
    return t


def _read(path: Path) -> tuple[dict[str, object], dict[str, object]]:
    r = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in r.fields.items()}
    tensors = {t.name: np.array(t.data).reshape([int(x) for x in reversed(t.shape)]) for t in r.tensors}
    return fields, tensors


def test_names_row_order_and_alpha(tmp_path: Path) -> None:
    src = _adapter(tmp_path / "a")
    out, sha = convert_peft_adapter(tmp_path / "a", CONFIG, tmp_path / "cache")
    fields, tensors = _read(out)
    assert fields["general.type"] == "adapter" and fields["adapter.type"] == "lora"
    assert fields["general.architecture"] == "llama" and fields["adapter.lora.alpha"] == pytest.approx(4.0)
    assert sorted(tensors) == sorted([
        "blk.0.attn_q.weight.lora_a", "blk.0.attn_q.weight.lora_b", "blk.0.attn_k.weight.lora_a",
        "blk.0.attn_k.weight.lora_b", "blk.1.ffn_down.weight.lora_a", "blk.1.ffn_down.weight.lora_b"])
    assert len(sha) == 64
    # A is unchanged; B of q and k takes llama.cpp's rotary row order: within each head, the even rows first
    np.testing.assert_array_equal(tensors["blk.0.attn_q.weight.lora_a"],
                                  src[f"{PREFIX}.0.self_attn.q_proj.lora_A.weight"])
    qb = src[f"{PREFIX}.0.self_attn.q_proj.lora_B.weight"]
    assert isinstance(qb, np.ndarray)
    head = 16 // 4
    expect = np.concatenate([qb[h * head:(h + 1) * head][[0, 2, 1, 3]] for h in range(4)])
    np.testing.assert_array_equal(tensors["blk.0.attn_q.weight.lora_b"], expect)
    kb = src[f"{PREFIX}.0.self_attn.k_proj.lora_B.weight"]
    assert isinstance(kb, np.ndarray)
    np.testing.assert_array_equal(tensors["blk.0.attn_k.weight.lora_b"],
                                  np.concatenate([kb[h * 4:(h + 1) * 4][[0, 2, 1, 3]] for h in range(2)]))
    np.testing.assert_array_equal(tensors["blk.1.ffn_down.weight.lora_b"],
                                  src[f"{PREFIX}.1.mlp.down_proj.lora_B.weight"])


def test_converted_once_per_weights(tmp_path: Path) -> None:
    _adapter(tmp_path / "a")
    first, sha = convert_peft_adapter(tmp_path / "a", CONFIG, tmp_path / "cache")
    made = first.stat().st_ino, first.read_bytes()
    again, sha2 = convert_peft_adapter(tmp_path / "a", CONFIG, tmp_path / "cache")
    assert (again, sha2) == (first, sha) and (again.stat().st_ino, again.read_bytes()) == made  # not rewritten
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]  # no temporary file left


def test_rslora_scale_is_kept(tmp_path: Path) -> None:
    _adapter(tmp_path / "a", rank=4, alpha=8, use_rslora=True)
    fields, _ = _read(convert_peft_adapter(tmp_path / "a", CONFIG, tmp_path / "c")[0])
    # llama.cpp scales by alpha'/r; PEFT's rsLoRA by alpha/sqrt(r): alpha' = alpha * sqrt(r)
    assert float(fields["adapter.lora.alpha"]) / 4 == pytest.approx(8 / math.sqrt(4))  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["use_dora", "modules_to_save"])
def test_what_llama_cpp_cannot_serve_is_refused_naming_the_field(tmp_path: Path, field: str) -> None:
    extra: dict[str, Any] = {field: True if field == "use_dora" else ["lm_head"]}
    _adapter(tmp_path / "a", **extra)
    with pytest.raises(EngineError, match=f"adapter_config.json: {field} is set"):
        convert_peft_adapter(tmp_path / "a", CONFIG, tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_tensor_it_cannot_map_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "a"
    d.mkdir()
    safetensors_numpy.save_file({"base_model.model.lm_head.lora_A.weight": np.zeros((2, 4), np.float32)},
                                str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 2}))
    with pytest.raises(EngineError, match="lm_head"):
        convert_peft_adapter(d, CONFIG, tmp_path / "c")


def test_the_cache_keeps_the_most_recently_served_conversions(tmp_path: Path) -> None:
    import os

    from rsi.models.server import lora_gguf

    cache = tmp_path / "cache"
    made = []
    for i in range(3):
        src = tmp_path / f"a{i}"
        _adapter(src, rank=2 + i)
        made.append(convert_peft_adapter(src, CONFIG, cache)[0])
        os.utime(made[-1], (1000 + i, 1000 + i))
    convert_peft_adapter(tmp_path / "a0", CONFIG, cache)  # served again: now the most recent
    lora_gguf._prune(cache, keep=2)
    assert sorted(p.name for p in cache.iterdir()) == sorted([made[0].name, made[2].name])
