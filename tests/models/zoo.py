"""The model zoo: real model definitions nobody here wrote (torchvision,
transformers, timm, and the models torch.onnx's documentation names; classic,
vision, text, state-space, video, audio and detection families), each
made small through its constructor or config, with random weights. No hub,
no download.

Each entry builds (model, make_inputs, dynamic_shapes): make_inputs(batch,
seq) gives the forward's keyword arguments for a batch size and a sequence
length (ignored by image models), so tests export at one size and compare at
others. Shared by tests/models/ and bench/zoo.py."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn


# tests/python: opinfo_harness (torchvision's operator registrations kept out, so that its
# model definitions, and timm's and transformers', load with the CPU torch) and the
# word-language model.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from opinfo_harness import hide_torchvision_ops  # noqa: E402

hide_torchvision_ops()


@dataclass
class Entry:
    name: str
    family: str  # classic (torch.onnx's docs), torchvision, transformers, timm, state-space,
    # video, audio, detection, moe, diffusion
    build: Callable[[], tuple[nn.Module, Callable[[int, int], dict], dict]]
    export_size: tuple[int, int] = (2, 8)  # (batch, seq)
    check_sizes: list = field(default_factory=lambda: [(1, 5), (3, 11)])
    atol: float = 1e-4
    rtol: float = 1e-4
    quick: bool = False  # in make test-quick


B = "batch"
S = "seq"


def images(c, h, w=None):
    w = w or h

    def make(batch, seq):
        return {"x": torch.randn(batch, c, h, w)}

    return make, {"x": {0: B}}


# ---- the models torch.onnx's documentation names ---------------------------

class DCGANGenerator(nn.Module):
    """DCGAN's generator (Radford et al.): a latent vector through strided
    transposed convolutions with batch norm and ReLU to a tanh image."""

    def __init__(self, nz=16, ngf=8, nc=3):
        super().__init__()
        layers, c_in = [], nz
        for i, mult in enumerate((8, 4, 2, 1)):
            layers += [nn.ConvTranspose2d(c_in, ngf * mult, 4, 1 if i == 0 else 2,
                                          0 if i == 0 else 1, bias=False),
                       nn.BatchNorm2d(ngf * mult), nn.ReLU(True)]
            c_in = ngf * mult
        layers += [nn.ConvTranspose2d(c_in, nc, 4, 2, 1, bias=False), nn.Tanh()]
        self.main = nn.Sequential(*layers)

    def forward(self, z):
        return self.main(z)


class DCGANDiscriminator(nn.Module):
    """DCGAN's discriminator: strided convolutions with batch norm and
    LeakyReLU(0.2) down to one sigmoid probability per image."""

    def __init__(self, ndf=8, nc=3):
        super().__init__()
        layers = [nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True)]
        c_in = ndf
        for mult in (2, 4, 8):
            layers += [nn.Conv2d(c_in, ndf * mult, 4, 2, 1, bias=False),
                       nn.BatchNorm2d(ndf * mult), nn.LeakyReLU(0.2, inplace=True)]
            c_in = ndf * mult
        layers += [nn.Conv2d(c_in, 1, 4, 1, 0, bias=False), nn.Sigmoid()]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


class SuperResolutionNet(nn.Module):
    """The efficient sub-pixel CNN of torch.onnx's super-resolution tutorial
    (Shi et al.): four convolutions, the last to upscale^2 channels, then
    pixel_shuffle."""

    def __init__(self, upscale_factor=3):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(1, 64, 5, 1, 2)
        self.conv2 = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv3 = nn.Conv2d(64, 32, 3, 1, 1)
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))


def _word_lm(kind):
    def build():
        from test_word_language_model import RNNModel, TransformerModel

        if kind == "Transformer":
            model = TransformerModel(50, 16, 2, 32, 2)

            def make(batch, seq):
                return {"src": torch.randint(0, 50, (seq, batch))}

            return model, make, {"src": {0: S, 1: B}}
        model = RNNModel(kind, 50, 16, 16, 2)

        def make(batch, seq):
            return {"input": torch.randint(0, 50, (seq, batch)),
                    "hidden": model.init_hidden(batch) if kind != "LSTM" else
                    tuple(torch.randn_like(h) for h in model.init_hidden(batch))}

        hidden = {1: B} if kind != "LSTM" else ({1: B}, {1: B})
        return model, make, {"input": {0: S, 1: B}, "hidden": hidden}

    return build


def _simple(factory, make_dyn):
    def build():
        make, dyn = make_dyn
        return factory(), make, dyn

    return build


def _tv(name, **kw):
    def factory():
        import torchvision.models as tvm

        return getattr(tvm, name)(weights=None, **kw)

    return factory


# More torchvision classifiers (name, constructor arguments, input).
MORE_TORCHVISION = [
    ("squeezenet1_1", {}, images(3, 64)),
    ("shufflenet_v2_x0_5", {}, images(3, 32)),
    ("googlenet", {"aux_logits": False, "init_weights": True}, images(3, 32)),
    ("mnasnet0_5", {}, images(3, 32)),
    ("regnet_y_400mf", {}, images(3, 32)),
    ("resnext50_32x4d", {}, images(3, 32)),
    ("efficientnet_v2_s", {}, images(3, 32)),
    ("swin_t", {}, images(3, 64)),
    ("maxvit_t", {}, images(3, 224)),  # its window partition needs 224
]


def _tv_densenet():
    from torchvision.models import DenseNet

    return DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16, num_classes=10)


def _tv_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=10)


def _tv_deeplab():
    import torchvision.models.segmentation as seg

    return seg.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5,
                                            aux_loss=False)


def _tv_fcn():
    import torchvision.models.segmentation as seg

    return seg.fcn_resnet50(weights=None, weights_backbone=None, num_classes=5, aux_loss=False)


# ---- transformers (from configs; no hub) ------------------------------------

def _text(vocab, mask=True, token_types=False):
    def make(batch, seq):
        d = {"input_ids": torch.randint(0, vocab, (batch, seq))}
        if mask:
            m = torch.ones(batch, seq, dtype=torch.long)
            m[0, -1] = 0  # one padded position: the mask is live data
            d["attention_mask"] = m
        if token_types:
            d["token_type_ids"] = torch.randint(0, 2, (batch, seq))
        return d

    dyn = {"input_ids": {0: B, 1: S}}
    if mask:
        dyn["attention_mask"] = {0: B, 1: S}
    if token_types:
        dyn["token_type_ids"] = {0: B, 1: S}
    return make, dyn


def _hf_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                     use_cache=False)
    return (GPT2LMHeadModel(cfg),) + _text(128)


def _hf_bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    return (BertModel(cfg),) + _text(128, token_types=True)


def _hf_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      use_cache=False)
    return (LlamaForCausalLM(cfg),) + _text(128)


def _hf_t5():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                   decoder_start_token_id=0, pad_token_id=0, use_cache=False)
    model = T5ForConditionalGeneration(cfg)

    def make(batch, seq):
        d = _text(128)[0](batch, seq)
        d["decoder_input_ids"] = torch.randint(0, 128, (batch, max(seq // 2, 1)))
        return d

    dyn = {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S},
           "decoder_input_ids": {0: B, 1: "decoder_seq"}}
    return model, make, dyn


def _hf_whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(vocab_size=128, num_mel_bins=16, d_model=32, encoder_layers=2,
                        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=32,
                        max_target_positions=32, pad_token_id=1, bos_token_id=2, eos_token_id=3,
                        decoder_start_token_id=2, use_cache=False)
    model = WhisperForConditionalGeneration(cfg)

    def make(batch, seq):
        # Whisper's encoder takes exactly 2 * max_source_positions frames.
        return {"input_features": torch.randn(batch, 16, 64),
                "decoder_input_ids": torch.randint(0, 128, (batch, seq))}

    return model, make, {"input_features": {0: B}, "decoder_input_ids": {0: B, 1: S}}


def _hf_vit():
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                    num_labels=10)
    model = ViTForImageClassification(cfg)

    def make(batch, seq):
        return {"pixel_values": torch.randn(batch, 3, 32, 32)}

    return model, make, {"pixel_values": {0: B}}


def _hf(config_cls, model_cls, seq2seq=False, **cfg):
    """A transformers model from its config class and keyword arguments (vocab 128, 2 layers,
    no cache); seq2seq models also take decoder_input_ids."""
    def build():
        import transformers

        config = getattr(transformers, config_cls)(vocab_size=128, **cfg)
        model = getattr(transformers, model_cls)(config)
        make, dyn = _text(128)
        if not seq2seq:
            return model, make, dyn

        def make_s2s(batch, seq):
            d = make(batch, seq)
            d["decoder_input_ids"] = torch.randint(0, 128, (batch, max(seq // 2, 1)))
            return d

        return model, make_s2s, dict(dyn, decoder_input_ids={0: B, 1: "decoder_seq"})

    return build


_ENC = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
_DEC = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, use_cache=False)
_S2S = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, use_cache=False)
# More of transformers' encoders, decoders and encoder-decoders than the issue names.
MORE_TRANSFORMERS = {
    "hf_distilbert": _hf("DistilBertConfig", "DistilBertModel", dim=32, n_layers=2, n_heads=4,
                         hidden_dim=64),
    "hf_roberta": _hf("RobertaConfig", "RobertaModel", **_ENC),
    "hf_albert": _hf("AlbertConfig", "AlbertModel", embedding_size=16, **_ENC),
    "hf_electra": _hf("ElectraConfig", "ElectraModel", embedding_size=16, **_ENC),
    "hf_deberta_v2": _hf("DebertaV2Config", "DebertaV2Model", **_ENC),
    "hf_bart": _hf("BartConfig", "BartForConditionalGeneration", seq2seq=True, **_S2S),
    "hf_mbart": _hf("MBartConfig", "MBartForConditionalGeneration", seq2seq=True, **_S2S),
    "hf_qwen2": _hf("Qwen2Config", "Qwen2ForCausalLM", **_DEC),
    "hf_mistral": _hf("MistralConfig", "MistralForCausalLM", **_DEC),
    "hf_phi3": _hf("Phi3Config", "Phi3ForCausalLM", pad_token_id=0, **_DEC),
    "hf_gemma": _hf("GemmaConfig", "GemmaForCausalLM", head_dim=16, **_DEC),
    "hf_gpt_neox": _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", hidden_size=64,
                       intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       use_cache=False),
    "hf_opt": _hf("OPTConfig", "OPTForCausalLM", hidden_size=64, ffn_dim=128,
                  num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=64,
                  max_position_embeddings=64, use_cache=False),
    "hf_falcon": _hf("FalconConfig", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, use_cache=False),
    "hf_gptj": _hf("GPTJConfig", "GPTJForCausalLM", n_embd=64, n_layer=2, n_head=4,
                   rotary_dim=8, n_positions=64, use_cache=False),
    "hf_bloom": _hf("BloomConfig", "BloomForCausalLM", hidden_size=64, n_layer=2, n_head=4,
                    use_cache=False),
}


# ---- timm ----------------------------------------------------------------------

def _timm(name, **kw):
    def factory():
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return factory


def _timm_volo():
    """timm's VOLO (outlook attention: nn.Unfold and F.fold, i.e. im2col and col2im, over a
    dynamic batch), narrow and one block per stage: its smallest registered variant,
    volo_d1_224, has 27M parameters and fixes its depths (create_model cannot change them)."""
    from timm.models.volo import VOLO

    return VOLO(layers=(1, 1, 1, 1), img_size=32, embed_dims=(16, 32, 32, 32),
                num_heads=(2, 4, 4, 4), stem_hidden_dim=8, num_classes=10)



# ---- state-space, video, audio, detection (transformers, torchvision, timm) -----

def _hf_cfg(config_cls, model_cls, make_dyn, **cfg):
    """A transformers model from its config class and keyword arguments, with the inputs of
    make_dyn = (make, dynamic_shapes)."""
    def build():
        import transformers

        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**cfg))
        make, dyn = make_dyn
        return model, make, dyn

    return build


def _tokens_fixed_length(vocab):
    """input_ids with a dynamic batch only: models whose forward loops over the sequence in
    Python (Mamba's reference scan) specialize its length."""
    make, _ = _text(vocab, mask=False)
    return make, {"input_ids": {0: B}}


def _pixels(c, h, w=None, name="pixel_values"):
    w = w or h

    def make(batch, seq):
        return {name: torch.randn(batch, c, h, w)}

    return make, {name: {0: B}}


def _frames(t, c, h, name="pixel_values", channels_first=False):
    """Video clips: (batch, frames, channels, h, w), or (batch, channels, frames, h, w)."""
    def make(batch, seq):
        shape = (batch, c, t, h, h) if channels_first else (batch, t, c, h, h)
        return {name: torch.randn(*shape)}

    return make, {name: {0: B}}


def _waveform(name="input_values"):
    """Raw audio: (batch, samples), the samples dynamic (a multiple of 16 plus 400)."""
    def make(batch, seq):
        return {name: torch.randn(batch, 400 + 16 * seq)}

    return make, {name: {0: B, 1: "samples"}}


def _spectrogram(frames, bins, name="input_values"):
    def make(batch, seq):
        return {name: torch.randn(batch, frames, bins)}

    return make, {name: {0: B}}


# Wav2Vec2-style feature encoders: three strided convolutions of 16 channels.
_CONV = dict(conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
_ENC_CFG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64)
_SSM = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, use_cache=False)
_SMALL_RESNET = dict(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                     layer_type="basic", out_features=["stage2", "stage3", "stage4"])


def _resnet_backbone():
    from transformers import ResNetConfig

    return ResNetConfig(**_SMALL_RESNET)


def _hf_detr(config_cls, model_cls, size=64, **cfg):
    def build():
        import transformers

        config = getattr(transformers, config_cls)(
            use_timm_backbone=False, backbone_config=_resnet_backbone(),
            use_pretrained_backbone=False, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, num_queries=10, num_labels=5, **cfg)
        model = getattr(transformers, model_cls)(config)
        make, dyn = _pixels(3, size)
        return model, make, dyn

    return build


def _hf_owlvit():
    from transformers import OwlViTConfig, OwlViTForObjectDetection

    cfg = OwlViTConfig(
        text_config=dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=16),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, image_size=32, patch_size=8),
        projection_dim=32)
    model = OwlViTForObjectDetection(cfg)

    def make(batch, seq):
        return {"input_ids": torch.randint(0, 128, (batch * 2, 16)),
                "pixel_values": torch.randn(batch, 3, 32, 32),
                "attention_mask": torch.ones(batch * 2, 16, dtype=torch.long)}

    return model, make, {"input_ids": {0: "queries"}, "pixel_values": {0: B},
                         "attention_mask": {0: "queries"}}


def _tv_video(name, size=32, frames=4):
    def build():
        import torchvision.models.video as tvv

        model = getattr(tvv, name)(weights=None, num_classes=10)
        make, dyn = _frames(frames, 3, size, name="x", channels_first=True)
        return model, make, dyn

    return build


NEW_ENTRIES = [
    # state-space
    ("hf_mamba", "state-space",
     _hf_cfg("MambaConfig", "MambaForCausalLM", _tokens_fixed_length(128), state_size=8,
             expand=2, conv_kernel=4, **_SSM)),
    ("hf_mamba2", "state-space",
     _hf_cfg("Mamba2Config", "Mamba2ForCausalLM", _text(128, mask=False), num_heads=8,
             head_dim=8, state_size=8, expand=2, n_groups=1, chunk_size=8, conv_kernel=4,
             **_SSM)),
    ("hf_falcon_mamba", "state-space",
     _hf_cfg("FalconMambaConfig", "FalconMambaForCausalLM", _tokens_fixed_length(128),
             state_size=8, expand=2, conv_kernel=4, **_SSM)),
    ("hf_recurrent_gemma", "state-space",
     _hf_cfg("RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", _tokens_fixed_length(128),
             vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=1, lru_width=32, attention_window_size=16,
             block_types=("recurrent", "attention"), use_cache=False)),
    # video
    ("hf_videomae", "video",
     _hf_cfg("VideoMAEConfig", "VideoMAEForVideoClassification", _frames(4, 3, 32),
             image_size=32, patch_size=8, num_frames=4, tubelet_size=2, num_labels=5,
             **_ENC_CFG)),
    ("hf_timesformer", "video",
     _hf_cfg("TimesformerConfig", "TimesformerForVideoClassification", _frames(4, 3, 32),
             image_size=32, patch_size=8, num_frames=4, num_labels=5, **_ENC_CFG)),
    ("hf_vivit", "video",
     _hf_cfg("VivitConfig", "VivitForVideoClassification", _frames(4, 3, 32),
             image_size=32, tubelet_size=[2, 8, 8], num_frames=4, num_labels=5, **_ENC_CFG)),
    ("tv_r3d_18", "video", _tv_video("r3d_18")),
    ("tv_mc3_18", "video", _tv_video("mc3_18")),
    ("tv_r2plus1d_18", "video", _tv_video("r2plus1d_18")),
    # audio
    ("hf_wav2vec2", "audio",
     _hf_cfg("Wav2Vec2Config", "Wav2Vec2ForCTC", _waveform(), vocab_size=32, **_CONV,
             **_ENC_CFG)),
    ("hf_hubert", "audio",
     _hf_cfg("HubertConfig", "HubertModel", _waveform(), **_CONV, **_ENC_CFG)),
    ("hf_wavlm", "audio",
     _hf_cfg("WavLMConfig", "WavLMModel", _waveform(), num_buckets=32, max_bucket_distance=64,
             **_CONV, **_ENC_CFG)),
    ("hf_sew", "audio",
     _hf_cfg("SEWConfig", "SEWModel", _waveform(), squeeze_factor=2, **_CONV, **_ENC_CFG)),
    ("hf_data2vec_audio", "audio",
     _hf_cfg("Data2VecAudioConfig", "Data2VecAudioModel", _waveform(), conv_pos_kernel_size=5,
             num_conv_pos_embeddings=5, **{k: v for k, v in _CONV.items()
                                           if k != "num_conv_pos_embeddings"}, **_ENC_CFG)),
    ("hf_unispeech", "audio",
     _hf_cfg("UniSpeechConfig", "UniSpeechModel", _waveform(), **_CONV, **_ENC_CFG)),
    ("hf_ast", "audio",
     _hf_cfg("ASTConfig", "ASTForAudioClassification", _spectrogram(64, 32), max_length=64,
             num_mel_bins=32, patch_size=8, frequency_stride=8, time_stride=8, num_labels=5,
             **_ENC_CFG)),
    # detection / segmentation heads
    ("hf_detr", "detection", _hf_detr("DetrConfig", "DetrForObjectDetection")),
    ("hf_conditional_detr", "detection",
     _hf_detr("ConditionalDetrConfig", "ConditionalDetrForObjectDetection")),
    ("hf_yolos", "detection",
     _hf_cfg("YolosConfig", "YolosForObjectDetection", _pixels(3, 32), image_size=[32, 32],
             patch_size=8, num_detection_tokens=10, num_labels=5, **_ENC_CFG)),
    ("hf_owlvit", "detection", _hf_owlvit),
    ("hf_dpt", "detection",
     _hf_cfg("DPTConfig", "DPTForDepthEstimation", _pixels(3, 32), image_size=32, patch_size=8,
             neck_hidden_sizes=[8, 16, 16, 32], fusion_hidden_size=16,
             backbone_out_indices=[0, 1, 2, 3], reassemble_factors=[4, 2, 1, 0.5],
             hidden_size=32, num_hidden_layers=4, initializer_range=0.2,
             num_attention_heads=4, intermediate_size=64)),
    ("hf_segformer", "detection",
     _hf_cfg("SegformerConfig", "SegformerForSemanticSegmentation", _pixels(3, 32),
             num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
             patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
             decoder_hidden_size=32, num_labels=5)),
]

CHECK_SIZES = {
    # The sequence length is static (see _tokens_fixed_length).
    **{n: [(1, 8), (3, 8)] for n in ("hf_mamba", "hf_falcon_mamba", "hf_recurrent_gemma")},
    # Mamba2's chunked scan pads the sequence to a multiple of chunk_size (8) with a pad
    # width that torch.export specializes: the graph holds for lengths divisible by 8, of two
    # chunks or more when exported at two (one chunk specializes the chunk count to 1).
    "hf_mamba2": [(1, 24), (3, 32)],
}
EXPORT_SIZES = {"hf_mamba2": (2, 16)}

# timm families (name, constructor arguments, input size).
MORE_TIMM = [
    ("mobilevit_xxs", {}, 64),
    ("levit_128s", {"img_size": 64}, 64),
    ("convnext_atto", {}, 32),
    ("coatnet_nano_rw_224", {"img_size": 64}, 64),
    ("poolformer_s12", {}, 32),
    ("regnetx_002", {}, 32),
    ("deit_tiny_patch16_224", {"img_size": 32, "patch_size": 8}, 32),
    ("swin_tiny_patch4_window7_224", {"img_size": 56, "window_size": 7}, 56),
    ("edgenext_xx_small", {}, 64),
    ("ghostnet_100", {}, 32),
    ("repvit_m0_9", {}, 64),
    ("fastvit_t8", {}, 64),
    ("mixer_s32_224", {"img_size": 64}, 64),
]


# ---- mixture of experts, diffusion ------------------------------------------------

def _hf_moe(config_cls, model_cls, **kw):
    """A transformers MoE decoder (its default grouped_mm experts), logits of
    a padded batch without cache."""
    return _hf(config_cls, model_cls, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, num_experts_per_tok=2, max_position_embeddings=64,
               use_cache=False, **kw)


class _Denoise(nn.Module):
    """A diffusers denoiser's noise prediction (return_dict=False)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, sample, timestep, encoder_hidden_states):
        return self.model(sample, timestep, encoder_hidden_states, return_dict=False)[0]


def _diffusers_unet():
    from diffusers import UNet2DConditionModel

    model = _Denoise(UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=16, in_channels=4,
        out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8))

    def make(batch, seq):  # seq: the prompt's length
        return {"sample": torch.randn(batch, 4, 16, 16), "timestep": torch.rand(batch) * 999,
                "encoder_hidden_states": torch.randn(batch, seq, 32)}

    return model, make, {"sample": {0: B}, "timestep": {0: B},
                         "encoder_hidden_states": {0: B, 1: S}}


def _diffusers_vae_decoder():
    from diffusers import AutoencoderKL

    class Decode(nn.Module):
        def __init__(self):
            super().__init__()
            self.vae = AutoencoderKL(
                block_out_channels=(16, 32), latent_channels=4, norm_num_groups=8,
                down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2)

        def forward(self, latent_sample):
            return self.vae.decode(latent_sample, return_dict=False)[0]

    def make(batch, seq):
        return {"latent_sample": torch.randn(batch, 4, 8, 8)}

    return Decode(), make, {"latent_sample": {0: B}}


MOE_DIFFUSION = [
    ("hf_mixtral", "moe", _hf_moe("MixtralConfig", "MixtralForCausalLM", intermediate_size=64,
                                  num_local_experts=4)),
    ("hf_qwen3_moe", "moe", _hf_moe("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                                    intermediate_size=128, moe_intermediate_size=32, head_dim=16,
                                    num_experts=4, decoder_sparse_step=1, norm_topk_prob=True)),
    ("diffusers_unet", "diffusion", _diffusers_unet),
    ("diffusers_vae_decoder", "diffusion", _diffusers_vae_decoder),
]


def _entries() -> list[Entry]:
    img32 = images(3, 32)
    img64 = images(3, 64)
    return [
        # torch.onnx's documentation
        Entry("alexnet", "classic", _simple(_tv("alexnet", num_classes=10), img64)),
        Entry("dcgan_generator", "classic",
              _simple(DCGANGenerator, (lambda b, s: {"z": torch.randn(b, 16, 1, 1)},
                                       {"z": {0: B}})), quick=True),
        Entry("dcgan_discriminator", "classic", _simple(DCGANDiscriminator, img64), quick=True),
        Entry("densenet", "classic", _simple(_tv_densenet, img32)),
        Entry("inception_v3", "classic",
              _simple(_tv("inception_v3", aux_logits=False, init_weights=True, num_classes=10),
                      images(3, 96))),
        Entry("resnet18", "classic", _simple(_tv("resnet18", num_classes=10), img32), quick=True),
        Entry("super_resolution", "classic", _simple(SuperResolutionNet, images(1, 24)),
              quick=True),
        Entry("vgg11", "classic", _simple(_tv("vgg11", num_classes=10), img32)),
        Entry("word_lm_lstm", "classic", _word_lm("LSTM"), quick=True),
        Entry("word_lm_gru", "classic", _word_lm("GRU")),
        Entry("word_lm_rnn_tanh", "classic", _word_lm("RNN_TANH")),
        Entry("word_lm_transformer", "classic", _word_lm("Transformer"), quick=True),
        # torchvision
        Entry("tv_mobilenet_v2", "torchvision", _simple(_tv("mobilenet_v2", num_classes=10), img32),
              quick=True),
        Entry("tv_mobilenet_v3_small", "torchvision",
              _simple(_tv("mobilenet_v3_small", num_classes=10), img32)),
        Entry("tv_efficientnet_b0", "torchvision",
              _simple(_tv("efficientnet_b0", num_classes=10), img32)),
        Entry("tv_convnext_tiny", "torchvision",
              _simple(_tv("convnext_tiny", num_classes=10), img32)),
        Entry("tv_vit", "torchvision", _simple(_tv_vit, img32)),
        Entry("tv_deeplabv3", "torchvision", _simple(_tv_deeplab, img64)),
        Entry("tv_fcn_resnet50", "torchvision", _simple(_tv_fcn, img32)),
        *(Entry(f"tv_{n}", "torchvision", _simple(_tv(n, num_classes=10, **kw), img))
          for n, kw, img in MORE_TORCHVISION),
        # transformers
        Entry("hf_gpt2", "transformers", _hf_gpt2, quick=True),
        Entry("hf_bert", "transformers", _hf_bert, quick=True),
        Entry("hf_llama", "transformers", _hf_llama, quick=True),
        Entry("hf_t5", "transformers", _hf_t5),
        Entry("hf_whisper", "transformers", _hf_whisper),
        Entry("hf_vit", "transformers", _hf_vit),
        *(Entry(name, "transformers", b) for name, b in MORE_TRANSFORMERS.items()),
        # timm
        Entry("timm_resnet18", "timm", _simple(_timm("resnet18", num_classes=10), img32)),
        Entry("timm_vit_tiny", "timm",
              _simple(_timm("vit_tiny_patch16_224", img_size=32, patch_size=8, num_classes=10),
                      img32), quick=True),
        Entry("timm_efficientnet_b0", "timm",
              _simple(_timm("efficientnet_b0", num_classes=10), img32)),
        *(Entry(f"timm_{n.split('_')[0]}", "timm", _simple(_timm(n, num_classes=10, **kw),
                                                           images(3, size)))
          for n, kw, size in MORE_TIMM),
        Entry("timm_volo", "timm", _simple(_timm_volo, img32)),
        # state-space, video, audio, detection
        *(Entry(name, family, b, export_size=EXPORT_SIZES.get(name, (2, 8)),
                check_sizes=CHECK_SIZES.get(name, [(1, 5), (3, 11)]))
          for name, family, b in NEW_ENTRIES),
        # mixture of experts, diffusion
        *(Entry(name, family, b) for name, family, b in MOE_DIFFUSION),
    ]


ZOO = {e.name: e for e in _entries()}


def build(name: str, seed: int = 0):
    """(model in eval mode, make_inputs, dynamic_shapes) of a zoo entry;
    batch-norm statistics and all-zero parameters (classifier heads that
    torchvision initializes to zero, biases) randomized so that they matter."""
    torch.manual_seed(seed)
    model, make, dyn = ZOO[name].build()
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and not p.any():
                p.normal_(0.0, 0.02)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model, make, dyn
