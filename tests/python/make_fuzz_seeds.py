"""Regenerates tests/data/fuzz_seeds/: programs captured from the model zoo's real model
definitions (tests/models/zoo.py: timm, transformers and torch.onnx's documentation models),
so that the fuzzers (make fuzz) mutate realistic graphs, with their symbolic batch and
sequence sizes, not only the hostile corpus's one-layer ones. Run from the repo root:

    python tests/python/make_fuzz_seeds.py

Each archive must stay under the fuzzers' -max_len (256 KiB, Makefile): the models are the
zoo's definitions narrowed further through their constructors or configs (fewer, thinner
layers: the weights are most of a .pt2, and the program's ops are what the fuzzing is for), and
each archive drops its sample inputs (conversion does not read them) and most node metadata
(DROPPED_METADATA: the Python stack traces are half a program's JSON; nn_module_stack stays).
Captured as pt2onnx.export captures (its capture rules), so the programs are the ones the core
is given. The files are checked in; a C++ test converts each (tests/cpp/test_archive.cpp,
FuzzSeeds), so a seed that stops converting, and would stop the fuzzers before conversion,
fails there."""

import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from zoo import B, S, DCGANGenerator, build, images  # noqa: E402

OUT = os.path.join(HERE, "..", "data", "fuzz_seeds")
MAX_BYTES = 200 * 1024  # below -max_len with room for the fuzzers' insertions


def _zoo(name):
    """A zoo entry as it is (small enough already)."""
    def make():
        model, make_inputs, dyn = build(name)
        return model, make_inputs(2, 8), dyn

    return make


def _image_model(factory, c, size):
    def make():
        torch.manual_seed(0)
        make_inputs, dyn = images(c, size)
        return factory().eval(), make_inputs(2, 0), dyn

    return make


def _timm_volo():
    # Outlook attention (unfold, fold: im2col, col2im over the batch), class attention.
    from timm.models.volo import VOLO

    return VOLO(layers=(1, 1), img_size=32, embed_dims=(8, 16), num_heads=(1, 2),
                downsamples=(True, False), outlook_attention=(True, False), stem_hidden_dim=4,
                mlp_ratio=1.0, post_layers=("ca",), use_aux_head=False, num_classes=4)


def _timm_swin():
    # Shifted windows (roll, window partition), relative position bias (an index gather).
    from timm.models.swin_transformer import SwinTransformer

    return SwinTransformer(img_size=32, patch_size=4, window_size=4, embed_dim=8, depths=(1, 1),
                           num_heads=(1, 2), mlp_ratio=1.0, num_classes=4)


def _timm_convnext():
    # Depthwise 7x7 convolutions, LayerNorm2d, GELU, layer scale, strided downsampling.
    from timm.models.convnext import ConvNeXt

    return ConvNeXt(depths=(1, 1, 1, 1), dims=(4, 8, 8, 16), num_classes=4)


def _hf_llama():
    # Rotary embedding, RMSNorm, grouped-query SDPA, causal mask over a symbolic batch and
    # sequence.
    def make():
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                          use_cache=False)
        ids = torch.randint(0, 32, (2, 8))
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        return (LlamaForCausalLM(cfg).eval(), kwargs,
                {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}})

    return make


# file stem -> (model, kwargs, dynamic_shapes) maker
SEEDS = {
    "zoo_timm_volo": _image_model(_timm_volo, 3, 32),
    "zoo_timm_swin": _image_model(_timm_swin, 3, 32),
    "zoo_timm_convnext": _image_model(_timm_convnext, 3, 32),
    "zoo_hf_llama": _hf_llama(),
    "zoo_word_lm_lstm": _zoo("word_lm_lstm"),
    "zoo_dcgan_generator": lambda: (DCGANGenerator(nz=4, ngf=2).eval(),
                                    {"z": torch.randn(2, 4, 1, 1)}, {"z": {0: B}}),
}


def capture(model, kwargs, dyn) -> bytes:
    """The program pt2onnx.export captures (its capture rules and dim handling), saved."""
    from pt2onnx._export import _capture

    ep, _, _ = _capture(model, (), kwargs, dyn, None, None, None)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return buf.getvalue()


# Node metadata left out: torch_fn and source_fn_stack, which conversion does not read, and
# stack_trace, which it reads for error messages only, whose text (the generating machine's
# paths and source lines) is most of the metadata's size.
DROPPED_METADATA = ("stack_trace", "torch_fn", "source_fn_stack")


def _drop_metadata(graph):
    for node in graph["nodes"]:
        for key in DROPPED_METADATA:
            node.get("metadata", {}).pop(key, None)
        for arg in node["inputs"]:
            sub = arg.get("arg", {}).get("as_graph")
            if sub:
                _drop_metadata(sub["graph"])


def slim(archive: bytes) -> bytes:
    """The archive without the sample inputs and DROPPED_METADATA (model.json re-encoded
    compactly). Entries stay stored (pt2onnx refuses compressed ones)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            name = info.filename
            if "/data/sample_inputs/" in name:
                continue
            payload = src.read(name)
            if name.endswith("/models/model.json"):
                program = json.loads(payload)
                _drop_metadata(program["graph_module"]["graph"])
                payload = json.dumps(program, separators=(",", ":")).encode()
            dst.writestr(name, payload)
    return out.getvalue()


def check_converts(path):
    """The seed converts with the pt2onnx command (what the fuzzers run, minus the mutation)."""
    cli = os.path.join(os.path.dirname(sys.executable), "pt2onnx")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cli, path, "-o", os.path.join(tmp, "seed.onnx")], check=True,
                       stdout=subprocess.DEVNULL)


def main():
    os.makedirs(OUT, exist_ok=True)
    for stem, make in SEEDS.items():
        torch.manual_seed(0)
        model, kwargs, dyn = make()
        data = slim(capture(model, kwargs, dyn))
        if len(data) > MAX_BYTES:
            raise SystemExit(f"{stem}: {len(data)} bytes, over {MAX_BYTES}: narrow the model")
        path = os.path.join(OUT, stem + ".pt2")
        with open(path, "wb") as f:
            f.write(data)
        check_converts(path)
        print(f"{stem}.pt2: {len(data) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
