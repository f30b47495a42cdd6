"""Base-model kernels for the CPU: `default` (transformers' own, in the model's dtype), or `int8`
(weights int8 per output channel, through PyTorch's dynamic-quantized linear: an fbgemm/onednn int8
GEMM with the activations quantized per call).

`int8` keeps every `nn.Linear` a `nn.Linear` (the float weight stays for PEFT, which wraps the layer and
adds its LoRA branch in float), so adapters load and serve on top of it. It is off by default: on the
fixed prompt set of `benchmarks/model_server.py --kernels` its greedy answers do not match
fp32 token for token (see benchmarks/README.md for the figures).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn


class Int8DynamicLinear(nn.Linear):
    """An nn.Linear whose forward runs PyTorch's dynamic int8 kernel (per-channel weight scales)."""

    _q: Any

    def __init__(self, base: nn.Linear) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.nn.quantized.dynamic import Linear as QLinear
            from torch.ao.quantization import per_channel_dynamic_qconfig

            shadow = nn.Linear(self.in_features, self.out_features, bias=base.bias is not None)
            shadow.weight = nn.Parameter(base.weight.detach().float().clone(), requires_grad=False)
            if base.bias is not None:
                shadow.bias = nn.Parameter(base.bias.detach().float().clone(), requires_grad=False)
            shadow.qconfig = per_channel_dynamic_qconfig  # type: ignore[assignment]
            # kept outside the module tree: PEFT loads adapter weights with load_state_dict, and the
            # quantized module's loader insists on its own keys
            object.__setattr__(self, "_q", QLinear.from_float(shadow))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._q(x.float()).to(x.dtype)


def apply_kernels(model: Any, kernels: str) -> str:
    """Swap the model's linear layers for `kernels`; return the label actually applied."""
    if kernels == "default":
        return "default"
    if kernels != "int8":
        raise ValueError(f"unknown kernels '{kernels}'")
    # lm_head is tied to the embedding: untie it so the lookup stays float and the head runs int8
    head = model.get_output_embeddings()
    if head is not None and head.weight is model.get_input_embeddings().weight:
        untied = nn.Linear(head.in_features, head.out_features, bias=False)
        untied.weight = nn.Parameter(head.weight.detach().clone(), requires_grad=False)
        model.set_output_embeddings(untied)
        model.config.tie_word_embeddings = False
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8DynamicLinear(child))
    return "int8"


__all__ = ["Int8DynamicLinear", "apply_kernels"]
