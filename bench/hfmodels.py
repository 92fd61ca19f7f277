"""Hugging Face transformers models built from configs, random init, nothing downloaded.

Importing this module needs torch; building a model needs ``transformers`` (``pip install -e
'.[bench]'``). Every builder seeds torch, takes its sizes as arguments (the defaults are the
sizes bench/real.py has always used) and returns ``(module in eval mode, example inputs,
input names)``. The module is wrapped so that it takes its inputs by position and returns the
first output only (``last_hidden_state``); no KV cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from architectures import SEED, Example, calibrated
from torch import nn

#: What a builder returns: the module, its example inputs, their names.
Built = tuple[nn.Module, Example, list[str]]
TOKENS = ["input_ids", "attention_mask"]
PIXELS = ["pixel_values"]


class HiddenState(nn.Module):
    """A transformers model called with keyword inputs, returning its first output only."""

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        kwargs = dict(zip(self.names, inputs, strict=True))
        return self.model(**kwargs, return_dict=False)[0]


def tokens(vocab: int, seq: int = 128) -> Example:
    """Seeded random ``input_ids`` (batch 1) and an all-ones ``attention_mask``."""
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, vocab, (1, seq), generator=g), torch.ones(1, seq, dtype=torch.int64)


def _text(model: nn.Module, vocab: int, seq: int) -> Built:
    return HiddenState(model, TOKENS).eval(), tokens(vocab, seq), TOKENS


def bert(
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    ffn: int = 1024,
    seq: int = 128,
    vocab: int = 30522,
    act: str = "gelu",
    attention: str | None = None,
) -> Built:
    """``BertModel``; ``act`` its ``hidden_act`` (``gelu``: torch's Erf form, ``gelu_python``:
    transformers' own formula), ``attention`` its attention implementation (``sdpa``, ``eager``;
    None: transformers' default)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    config = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        vocab_size=vocab,
        hidden_act=act,
    )
    if attention:
        config._attn_implementation = attention
    return _text(BertModel(config), vocab, seq)


def gpt2(
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    seq: int = 128,
    vocab: int = 50257,
    act: str = "gelu_new",
) -> Built:
    """``GPT2Model``; ``act`` its ``activation_function`` (``gelu_new``: the Pow form,
    ``gelu_pytorch_tanh``: torch's tanh approximation)."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(SEED)
    config = GPT2Config(
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        vocab_size=vocab,
        use_cache=False,
        activation_function=act,
    )
    return _text(GPT2Model(config), vocab, seq)


def distilbert(layers: int = 4, hidden: int = 256, heads: int = 4, ffn: int = 1024) -> Built:
    """``DistilBertModel``; seq 128."""
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(SEED)
    config = DistilBertConfig(dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=ffn)
    return _text(DistilBertModel(config), config.vocab_size, 128)


def llama(
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 344,
    seq: int = 64,
    vocab: int = 1024,
) -> Built:
    """``LlamaModel`` (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention with
    ``kv_heads`` key/value heads), no KV cache."""
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(SEED)
    config = LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=ffn,
        vocab_size=vocab,
        max_position_embeddings=max(256, seq),
        use_cache=False,
    )
    return _text(LlamaModel(config), vocab, seq)


def vit(
    layers: int = 4, hidden: int = 256, heads: int = 4, ffn: int = 1024, image: int = 224
) -> Built:
    """``ViTModel`` without its pooler, 16x16 patches; 1x3x``image``x``image``."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(SEED)
    config = ViTConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        image_size=image,
    )
    model = HiddenState(ViTModel(config, add_pooling_layer=False), PIXELS)
    return model.eval(), (torch.randn(1, 3, image, image),), PIXELS


def convnext() -> Built:
    """``ConvNextModel``, the default config (ConvNeXt-T: depths 3-3-9-3, widths 96-768, 7x7
    depthwise convs); 1x3x224x224."""
    from transformers import ConvNextConfig, ConvNextModel

    torch.manual_seed(SEED)
    model = HiddenState(ConvNextModel(ConvNextConfig()), PIXELS)
    return model.eval(), (torch.randn(1, 3, 224, 224),), PIXELS


def resnet50() -> Built:
    """``ResNetModel``, the default config (ResNet-50: bottlenecks 3-4-6-3), batch norm
    calibrated (:func:`architectures.calibrated`); 1x3x224x224."""
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(SEED)
    example = torch.randn(1, 3, 224, 224)
    model = HiddenState(ResNetModel(ResNetConfig()), PIXELS)
    return calibrated(model, example), (example,), PIXELS
