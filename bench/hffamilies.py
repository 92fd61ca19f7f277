"""The model families users bring (bench/families.py), tiny Hugging Face models from configs.

Each builder seeds torch, builds the model from a tiny config (2 layers or stages, hidden 64-128,
short sequences; random init, nothing downloaded), gives every bias a small non-zero value
(:func:`architectures.nonzero_biases`) and returns ``(module in eval mode, example inputs, input
names)``, the module taking its inputs by position and returning its first output
(:class:`hfmodels.HiddenState`). Importing this module does not import torch; a builder does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TOKENS = ["input_ids", "attention_mask"]
SEQ = 32


def _wrapped(model: Any, names: list[str], example: tuple[Any, ...], **extra: Any) -> Any:
    from architectures import nonzero_biases
    from hfmodels import HiddenState

    return HiddenState(nonzero_biases(model), names, **extra).eval(), example, names


def _tokens(vocab: int, seq: int = SEQ) -> tuple[Any, Any]:
    from hfmodels import tokens

    return tokens(vocab, seq)


def _model(config_name: str, model_name: str, **config: Any) -> Any:
    """``transformers.<model_name>`` of ``transformers.<config_name>(**config)``, torch seeded
    just before (:data:`architectures.SEED`): every call builds the same model."""
    import torch
    import transformers
    from architectures import SEED

    torch.manual_seed(SEED)
    return getattr(transformers, model_name)(getattr(transformers, config_name)(**config))


def _decoder(config_name: str, model_name: str, **sizes: Any) -> Any:
    """A decoder-only model (prefill, no cache) from ``transformers.<config_name>``."""
    common_sizes = {
        "vocab_size": 1000,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
    }
    model = _model(config_name, model_name, **(common_sizes | sizes))
    return _wrapped(model, TOKENS, _tokens(1000), use_cache=False)


def qwen() -> Any:
    import transformers

    if hasattr(transformers, "Qwen3Config"):
        return _decoder("Qwen3Config", "Qwen3Model", head_dim=32)
    return _decoder("Qwen2Config", "Qwen2Model")


def mistral() -> Any:
    return _decoder("MistralConfig", "MistralModel", sliding_window=None)


def phi3() -> Any:
    return _decoder("Phi3Config", "Phi3Model", pad_token_id=0)


def gemma3() -> Any:
    import transformers

    if hasattr(transformers, "Gemma3TextConfig"):
        return _decoder(
            "Gemma3TextConfig",
            "Gemma3TextModel",
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=16,
        )
    return _decoder("GemmaConfig", "GemmaModel", head_dim=256, num_key_value_heads=1)


def t5() -> Any:
    """``T5Model``: the encoder on 32 tokens and one decoder step."""
    import torch
    from architectures import SEED
    from transformers import T5Config, T5Model

    torch.manual_seed(SEED)
    config = T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    ids, mask = _tokens(1000)
    example = (ids, mask, torch.zeros(1, 1, dtype=torch.int64))
    names = [*TOKENS, "decoder_input_ids"]
    return _wrapped(T5Model(config), names, example, use_cache=False)


def bart() -> Any:
    """``BartModel``: the encoder on 32 tokens and the decoder on 4."""
    import torch
    from architectures import SEED
    from transformers import BartConfig, BartModel

    torch.manual_seed(SEED)
    config = BartConfig(
        vocab_size=1000,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=64,
    )
    ids, mask = _tokens(1000)
    example = (ids, mask, ids[:, :4].clone())
    names = [*TOKENS, "decoder_input_ids"]
    return _wrapped(BartModel(config), names, example, use_cache=False)


def whisper() -> Any:
    """Whisper's encoder on 64 frames of 80 mel bins."""
    import torch

    model = _model(
        "WhisperConfig",
        "WhisperModel",
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_mel_bins=80,
        max_source_positions=32,
        max_target_positions=32,
        vocab_size=1000,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    return _wrapped(model.encoder, ["input_features"], (torch.randn(1, 80, 64),))


def clip_text() -> Any:
    model = _model(
        "CLIPTextConfig",
        "CLIPTextModel",
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=SEQ,
        hidden_act="quick_gelu",
    )
    return _wrapped(model, TOKENS, _tokens(1000))


def clip_vision() -> Any:
    import torch

    model = _model(
        "CLIPVisionConfig",
        "CLIPVisionModel",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=8,
        hidden_act="quick_gelu",
    )
    return _wrapped(model, ["pixel_values"], (torch.randn(1, 3, 64, 64),))


def wav2vec2() -> Any:
    """``Wav2Vec2Model`` on 1,600 samples: a 3-conv feature extractor (GroupNorm on the first),
    the convolutional position embedding, 2 post-norm layers."""
    import torch

    model = _model(
        "Wav2Vec2Config",
        "Wav2Vec2Model",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        vocab_size=32,
    )
    return _wrapped(model, ["input_values"], (torch.randn(1, 1600),))


def swin() -> Any:
    import torch

    model = _model(
        "SwinConfig",
        "SwinModel",
        image_size=64,
        patch_size=4,
        embed_dim=32,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
    )
    return _wrapped(model, ["pixel_values"], (torch.randn(1, 3, 64, 64),))


def segformer() -> Any:
    import torch

    model = _model(
        "SegformerConfig",
        "SegformerModel",
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[4, 2],
        hidden_sizes=[32, 64],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[4, 4],
    )
    return _wrapped(model, ["pixel_values"], (torch.randn(1, 3, 64, 64),))


MODELS: dict[str, Callable[[], Any]] = {
    "qwen3": qwen,
    "mistral": mistral,
    "phi3": phi3,
    "gemma3": gemma3,
    "t5": t5,
    "bart": bart,
    "whisper-encoder": whisper,
    "clip-text": clip_text,
    "clip-vision": clip_vision,
    "wav2vec2": wav2vec2,
    "swin": swin,
    "segformer": segformer,
}


# ---------------------------------------------------------------------------------------------
# more families (``bench/families.py --more``): what users bring that the first twelve are not


def _text_model(config_name: str, model_name: str, vocab: int = 1000, **config: Any) -> Any:
    """A text model on :data:`SEQ` tokens (``input_ids``, ``attention_mask``), no cache."""
    model = _model(config_name, model_name, vocab_size=vocab, **config)
    extra = {"use_cache": False} if "use_cache" in model.config.to_dict() else {}
    return _wrapped(model, TOKENS, _tokens(vocab), **extra)


def _pixels(config_name: str, model_name: str, side: int = 64, **config: Any) -> Any:
    """A vision model on one ``side`` x ``side`` RGB image."""
    import torch

    model = _model(config_name, model_name, **config)
    return _wrapped(model, ["pixel_values"], (torch.randn(1, 3, side, side),))


#: Sizes of the decoder-only families below, in each config's own names.
_SMALL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}


def gpt_neox() -> Any:
    """Pythia: a quarter of each head rotated, attention and MLP in parallel off one input."""
    return _text_model(
        "GPTNeoXConfig",
        "GPTNeoXModel",
        **_SMALL,
        intermediate_size=256,
        rotary_pct=0.25,
        use_parallel_residual=True,
        max_position_embeddings=256,
    )


def falcon() -> Any:
    """Falcon-7B's block: one shared key/value head (multi-query), attention and MLP in parallel."""
    return _text_model(
        "FalconConfig",
        "FalconModel",
        **_SMALL,
        multi_query=True,
        parallel_attn=True,
        new_decoder_architecture=False,
        bias=True,
        alibi=False,
    )


def bloom() -> Any:
    """BLOOM: ALiBi position biases added to the scores, an embedding layer norm."""
    return _text_model("BloomConfig", "BloomModel", hidden_size=128, n_layer=2, n_head=4)


def opt() -> Any:
    return _text_model(
        "OPTConfig",
        "OPTModel",
        **_SMALL,
        ffn_dim=256,
        word_embed_proj_dim=128,
        max_position_embeddings=64,
    )


def phi() -> Any:
    """Phi-2: half of each head rotated, a parallel block, ``gelu_new``."""
    return _text_model(
        "PhiConfig",
        "PhiModel",
        **_SMALL,
        intermediate_size=256,
        partial_rotary_factor=0.5,
        max_position_embeddings=256,
    )


def stablelm() -> Any:
    return _text_model(
        "StableLmConfig",
        "StableLmModel",
        **_SMALL,
        intermediate_size=256,
        num_key_value_heads=2,
        partial_rotary_factor=0.25,
        max_position_embeddings=256,
    )


def gpt_neo() -> Any:
    """GPT-Neo: a global layer then a local one (a sliding window of 16 tokens)."""
    return _text_model(
        "GPTNeoConfig",
        "GPTNeoModel",
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        attention_types=[[["global", "local"], 1]],
        window_size=16,
        max_position_embeddings=64,
    )


def mixtral() -> Any:
    """Mixtral: 4 experts, each token routed to its top 2 (transformers' ``batched_mm`` experts:
    each token's experts' weights gathered; its default sorts tokens by expert with ``histc``,
    which neither exporter writes)."""
    return _decoder(
        "MixtralConfig",
        "MixtralModel",
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=None,
        experts_implementation="batched_mm",
    )


def deberta_v2() -> Any:
    """DeBERTa-v2: attention scores plus content-to-position and position-to-content terms."""
    return _text_model(
        "DebertaV2Config",
        "DebertaV2Model",
        **_SMALL,
        intermediate_size=256,
        relative_attention=True,
        position_buckets=32,
        max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"],
        max_position_embeddings=64,
    )


def albert() -> Any:
    """ALBERT: one layer's weights shared by both layers, a factorized embedding."""
    return _text_model(
        "AlbertConfig",
        "AlbertModel",
        **_SMALL,
        embedding_size=64,
        intermediate_size=256,
        max_position_embeddings=64,
    )


def modernbert() -> Any:
    return _text_model(
        "ModernBertConfig",
        "ModernBertModel",
        **_SMALL,
        intermediate_size=256,
        global_attn_every_n_layers=2,
        local_attention=16,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )


def distilbert() -> Any:
    return _text_model(
        "DistilBertConfig", "DistilBertModel", dim=128, n_layers=2, n_heads=4, hidden_dim=256
    )


def beit() -> Any:
    """BEiT: relative position biases added to every layer's scores, layer scale."""
    return _pixels(
        "BeitConfig",
        "BeitModel",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=64,
        patch_size=8,
        use_relative_position_bias=True,
    )


def deit() -> Any:
    return _pixels(
        "DeiTConfig",
        "DeiTModel",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=64,
        patch_size=8,
    )


def convnextv2() -> Any:
    """ConvNeXt-V2: depthwise 7x7, channels-last layer norm, global response normalization."""
    return _pixels(
        "ConvNextV2Config",
        "ConvNextV2Model",
        num_stages=2,
        hidden_sizes=[32, 64],
        depths=[1, 1],
        image_size=64,
    )


def mobilevitv2() -> Any:
    return _pixels("MobileViTV2Config", "MobileViTV2Model", image_size=64, width_multiplier=0.5)


def hubert() -> Any:
    """HuBERT on 1,600 samples (wav2vec2's sizes)."""
    import torch

    model = _model(
        "HubertConfig",
        "HubertModel",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        vocab_size=32,
    )
    return _wrapped(model, ["input_values"], (torch.randn(1, 1600),))


MORE: dict[str, Callable[[], Any]] = {
    "gpt-neox": gpt_neox,
    "falcon": falcon,
    "bloom": bloom,
    "opt": opt,
    "phi": phi,
    "stablelm": stablelm,
    "gpt-neo": gpt_neo,
    "mixtral": mixtral,
    "deberta-v2": deberta_v2,
    "albert": albert,
    "modernbert": modernbert,
    "distilbert": distilbert,
    "beit": beit,
    "deit": deit,
    "convnextv2": convnextv2,
    "mobilevitv2": mobilevitv2,
    "hubert": hubert,
}
