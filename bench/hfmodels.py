"""Hugging Face transformers models built from configs, random init, nothing downloaded.

Importing this module needs torch; building a model needs ``transformers`` (``pip install -e
'.[bench]'``). Every builder seeds torch, gives every bias a small seeded non-zero value
(:func:`architectures.nonzero_biases`: random init leaves them at 0, trained models do not),
takes its sizes as arguments (the defaults are the sizes bench/real.py has always used) and
returns ``(module in eval mode, example inputs, input names)``. The module is wrapped so that it
takes its inputs by position and returns the first output only (``last_hidden_state``); no KV
cache, except :func:`llama_decode` (one token after a cache of past keys and values, which are
inputs; the present ones are outputs).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from architectures import SEED, Example, calibrated, nonzero_biases
from torch import nn

#: What a builder returns: the module, its example inputs, their names.
Built = tuple[nn.Module, Example, list[str]]
TOKENS = ["input_ids", "attention_mask"]
PIXELS = ["pixel_values"]


class HiddenState(nn.Module):
    """A transformers model called with keyword inputs (and ``extra`` keywords), returning its
    first output only."""

    def __init__(self, model: nn.Module, names: Sequence[str], **extra: object) -> None:
        super().__init__()
        self.model, self.names, self.extra = model, tuple(names), extra

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        kwargs = dict(zip(self.names, inputs, strict=True))
        return self.model(**kwargs, **self.extra, return_dict=False)[0]


def tokens(vocab: int, seq: int = 128) -> Example:
    """Seeded random ``input_ids`` (batch 1) and an all-ones ``attention_mask``."""
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, vocab, (1, seq), generator=g), torch.ones(1, seq, dtype=torch.int64)


def _text(model: nn.Module, vocab: int, seq: int) -> Built:
    return HiddenState(nonzero_biases(model), TOKENS).eval(), tokens(vocab, seq), TOKENS


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
    model = _llama_model(layers, hidden, heads, kv_heads, ffn, vocab, seq, cache=False)
    return _text(model, vocab, seq)


def gptj(
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    rotary_dim: int = 16,
    seq: int = 64,
    vocab: int = 1024,
) -> Built:
    """``GPTJModel`` (interleaved rotary embedding on the first ``rotary_dim`` of each head, as
    GPT-J 6B and CodeGen rotate; parallel attention and MLP; tanh GELU), no KV cache."""
    from transformers import GPTJConfig, GPTJModel

    torch.manual_seed(SEED)
    config = GPTJConfig(
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        rotary_dim=rotary_dim,
        vocab_size=vocab,
        n_positions=max(256, seq),
        use_cache=False,
    )
    return _text(GPTJModel(config), vocab, seq)


def _llama_model(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    positions: int,
    *,
    cache: bool,
) -> nn.Module:
    """A randomly initialized ``LlamaModel`` (seeded) for at least ``positions`` positions."""
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(SEED)
    config = LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=ffn,
        vocab_size=vocab,
        max_position_embeddings=max(256, positions),
        use_cache=cache,
    )
    return nonzero_biases(LlamaModel(config))


class Decode(nn.Module):
    """A decoder's one-token step: ``(input_ids, attention_mask, past_key_0, past_value_0, ...)``
    → ``(last_hidden_state, present_key_0, present_value_0, ...)``; the past is handed to the
    model as a ``DynamicCache``."""

    def __init__(self, model: nn.Module, layers: int) -> None:
        super().__init__()
        self.model, self.layers = model, layers
        # transformers 5 renames ``past_key_values`` to ``cache``
        params = inspect.signature(model.forward).parameters
        self.keyword = "cache" if "cache" in params else "past_key_values"

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        kwargs = {self.keyword: cache, "use_cache": True, "return_dict": False}
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]
        return (hidden, *[t for layer in cache.layers for t in (layer.keys, layer.values)])


def llama_decode(
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 344,
    past: int = 128,
    vocab: int = 1024,
) -> Built:
    """``LlamaModel`` as :func:`llama`, one decode step: one new token after ``past`` cached
    ones (inputs ``input_ids`` 1x1, ``attention_mask`` 1x(past+1), ``past_key_<i>`` and
    ``past_value_<i>`` 1 x kv_heads x past x head_dim per layer, seeded normal); outputs the
    hidden state and each layer's present key and value (past + 1 positions)."""
    llama_model = _llama_model(layers, hidden, heads, kv_heads, ffn, vocab, past + 1, cache=True)
    model = Decode(llama_model, layers).eval()
    g = torch.Generator().manual_seed(SEED)
    example = [
        torch.randint(0, vocab, (1, 1), generator=g),
        torch.ones(1, past + 1, dtype=torch.int64),
    ]
    names = list(TOKENS)
    for i in range(layers):
        shape = (1, kv_heads, past, hidden // heads)
        example += [torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)]
        names += [f"past_key_{i}", f"past_value_{i}"]
    return model, tuple(example), names


def vit(
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    ffn: int = 1024,
    image: int = 224,
    any_size: bool = False,
) -> Built:
    """``ViTModel`` without its pooler, 16x16 patches; 1x3x``image``x``image``; with
    ``any_size`` its position embeddings are interpolated to the image's patches
    (``interpolate_pos_encoding``), so it runs at other image sizes."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(SEED)
    config = ViTConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        image_size=image,
    )
    extra = {"interpolate_pos_encoding": True} if any_size else {}
    vit_model = nonzero_biases(ViTModel(config, add_pooling_layer=False))
    model = HiddenState(vit_model, PIXELS, **extra)
    return model.eval(), (torch.randn(1, 3, image, image),), PIXELS


def convnext(
    widths: tuple[int, ...] = (96, 192, 384, 768),
    depths: tuple[int, ...] = (3, 3, 9, 3),
    image: int = 224,
) -> Built:
    """``ConvNextModel``; the defaults are the default config (ConvNeXt-T: depths 3-3-9-3,
    widths 96-768, 7x7 depthwise convs); 1x3x``image``x``image``."""
    from transformers import ConvNextConfig, ConvNextModel

    torch.manual_seed(SEED)
    config = ConvNextConfig(hidden_sizes=list(widths), depths=list(depths))
    model = HiddenState(nonzero_biases(ConvNextModel(config)), PIXELS)
    return model.eval(), (torch.randn(1, 3, image, image),), PIXELS


def resnet50() -> Built:
    """``ResNetModel``, the default config (ResNet-50: bottlenecks 3-4-6-3), batch norm
    calibrated (:func:`architectures.calibrated`); 1x3x224x224."""
    return resnet()


def resnet(
    stem: int = 64,
    widths: tuple[int, ...] = (256, 512, 1024, 2048),
    depths: tuple[int, ...] = (3, 4, 6, 3),
    image: int = 224,
) -> Built:
    """``ResNetModel`` (bottleneck blocks), batch norm calibrated
    (:func:`architectures.calibrated`); the defaults are ResNet-50's; 1x3x``image``x``image``."""
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(SEED)
    example = torch.randn(1, 3, image, image)
    config = ResNetConfig(embedding_size=stem, hidden_sizes=list(widths), depths=list(depths))
    model = HiddenState(nonzero_biases(ResNetModel(config)), PIXELS)
    return calibrated(model, example), (example,), PIXELS
