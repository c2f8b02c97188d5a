"""export(weights=...): models built without weight data (init_empty_weights,
FakeTensorMode) exported with their weights read from a state dict or from
safetensors files, whose headers the C++ core parses and checks. Every good
case is compared byte for byte with the export of the same model in memory
and run in onnxruntime; every bad one must fail with an error naming the
tensor and leave no output."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import pt2onnx


class Net(nn.Module):
    """Linear layers, a tied weight, a persistent buffer (a checkpoint holds
    it) and a non-persistent one computed at init (it does not)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.norm = nn.LayerNorm(16)
        self.register_buffer("scale", torch.full((16,), 0.5))
        self.register_buffer("freq", torch.arange(16, dtype=torch.float32) / 16,
                             persistent=False)

    def forward(self, ids):
        h = self.emb(ids) * self.scale + self.freq
        h = self.fc2(torch.relu(self.fc1(h)))
        return self.head(self.norm(h))


def _real():
    torch.manual_seed(0)
    m = Net().eval()
    with torch.no_grad():
        m.scale.uniform_(0.5, 1.5)  # not its init value: must come from the source
    return m


def _empty():
    with pt2onnx.init_empty_weights():
        return Net().eval()


def _checkpoint_dict(model):
    """The state dict as save_pretrained writes it: tied weights once."""
    sd = model.state_dict()
    sd.pop("head.weight")
    return {k: v.contiguous() for k, v in sd.items()}


IDS = torch.randint(0, 50, (2, 7))
DYN = {"ids": {0: "batch", 1: "seq"}}


def _export(model, path, **kw):
    return pt2onnx.export(model, (IDS,), str(path), dynamic_shapes=DYN, **kw)


def _files(r):
    return [open(p, "rb").read() for p in [r.path, *r.data_paths]]


def _check_ort(path, model):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 50, (3, 11))  # other sizes than the export's
    got = sess.run(None, {"ids": ids.numpy()})[0]
    with torch.no_grad():
        want = model(ids).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def _out(tmp_path, name="out"):
    d = tmp_path / name
    d.mkdir()
    return d / "model.onnx"


@pytest.fixture
def reference(tmp_path):
    """The model exported from memory: the files to compare with (the same
    file name, in another directory)."""
    real = _real()
    r = _export(real, _out(tmp_path, "mem"))
    return real, _files(r)


def test_init_empty_weights_makes_fake_parameters_and_real_buffers():
    m = _empty()
    from torch._subclasses.fake_tensor import is_fake

    assert all(is_fake(p) for p in m.parameters())
    assert m.head.weight is m.emb.weight
    assert not is_fake(m.freq) and torch.equal(m.freq, torch.arange(16) / 16)


def test_state_dict(tmp_path, reference):
    real, want = reference
    path = _out(tmp_path)
    r = _export(_empty(), path, weights=real.state_dict())
    assert _files(r) == want
    assert r.timings["weights"] >= 0
    _check_ort(path, real)


def test_one_safetensors_file(tmp_path, reference):
    real, want = reference
    save_file(_checkpoint_dict(real), tmp_path / "model.safetensors")
    path = _out(tmp_path)
    r = _export(_empty(), path, weights=tmp_path / "model.safetensors")
    assert _files(r) == want
    # Tied: one tensor in the file, one initializer in the model.
    import onnx

    names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.initializer]
    assert sum(n in ("emb.weight", "head.weight") for n in names) == 1, names
    _check_ort(path, real)


def test_sharded_checkpoint_directory(tmp_path, reference):
    real, want = reference
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    sd = _checkpoint_dict(real)
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: sd[k] for k in keys}, ckpt / shard)
        weight_map.update({k: shard for k in keys})
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    path = _out(tmp_path)
    assert _files(_export(_empty(), path, weights=ckpt)) == want
    # The shards as a list, any order.
    path2 = _out(tmp_path, "out2")
    r = _export(_empty(), path2, weights=[ckpt / s for s in reversed(list(shards))])
    assert _files(r)[1:] == want[1:]
    _check_ort(path, real)


def test_fake_tensor_mode_model(tmp_path, reference):
    real, want = reference
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        m = Net().eval()
    # Buffers made under the mode are fake too: the checkpoint holds `scale`,
    # the computed `freq` comes from a state dict.
    assert mode is not None
    sd = dict(_checkpoint_dict(real), freq=real.freq)
    path = _out(tmp_path)
    r = _export(m, path, weights=sd)
    assert _files(r) == want


def _fails(tmp_path, weights, *patterns, model=None):
    path = tmp_path / "bad" / "model.onnx"
    path.parent.mkdir(exist_ok=True)
    with pytest.raises(Exception) as e:
        _export(model or _empty(), path, weights=weights)
    for p in patterns:
        assert p in str(e.value), str(e.value)
    assert os.listdir(path.parent) == []  # no output, no temporary left
    return str(e.value)


def test_missing_extra_and_mismatched_tensors_are_all_named(tmp_path):
    sd = _checkpoint_dict(_real())
    del sd["fc1.bias"]
    sd["fc2.weight"] = sd["fc2.weight"].double()
    sd["norm.weight"] = torch.ones(17)
    sd["extra.weight"] = torch.ones(3)
    save_file(sd, tmp_path / "model.safetensors")
    msg = _fails(tmp_path, tmp_path / "model.safetensors",
                 "'fc1.bias' (torch.float32, shape [32])",
                 "'fc2.weight' in ", "dtype float64, but the model's is torch.float32",
                 "'norm.weight' in", "shape [17], but the model's is [16]",
                 "'extra.weight' in")
    assert "model.safetensors" in msg


def test_missing_weight_without_source(tmp_path):
    path = tmp_path / "model.onnx"
    with pytest.raises(ValueError, match="has no data to export .* pass weights="):
        _export(_empty(), path)
    assert not path.exists()


def test_bad_weights_argument(tmp_path):
    with pytest.raises(TypeError, match="weights must be"):
        _export(_empty(), tmp_path / "m.onnx", weights=3)
    with pytest.raises(FileNotFoundError, match="no .safetensors file"):
        _export(_empty(), tmp_path / "m.onnx", weights=tmp_path)
    with pytest.raises(ValueError, match="verify=True"):
        _export(_empty(), tmp_path / "m.onnx", weights=_real().state_dict(), verify=True)


# ---- hostile and broken safetensors headers ---------------------------------------------------

def _raw(path, header, data=b"", length=None):
    h = json.dumps(header).encode() if isinstance(header, dict) else header
    path.write_bytes(struct.pack("<Q", len(h) if length is None else length) + h + data)
    return path


def _good_header():
    """A header + data holding the checkpoint (offsets computed here)."""
    sd = _checkpoint_dict(_real())
    header, data = {}, b""
    for k, v in sd.items():
        b = v.numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape),
                     "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return header, data


def test_raw_writer_matches_the_format(tmp_path, reference):
    real, want = reference
    header, data = _good_header()
    header["__metadata__"] = {"format": "pt"}
    f = _raw(tmp_path / "w.safetensors", header, data)
    assert _files(_export(_empty(), _out(tmp_path), weights=f)) == want


@pytest.mark.parametrize("case", ["huge_header", "header_past_end", "not_json", "short_file",
                                  "truncated", "overlap", "unknown_dtype", "span_mismatch",
                                  "negative_shape", "offsets_reversed", "duplicate_across_files"])
def test_hostile_headers(tmp_path, case):
    header, data = _good_header()
    f = tmp_path / "w.safetensors"
    files = [f]
    if case == "huge_header":
        _raw(f, b"{}", length=1 << 62)
        want = ["exceeds the format's limit of 100 MB"]
    elif case == "header_past_end":
        _raw(f, b"{}" + b" " * 10, length=4096)
        want = ["runs past the end of the file"]
    elif case == "not_json":
        _raw(f, b"{not json")
        want = ["header is not a JSON object"]
    elif case == "short_file":
        f.write_bytes(b"abc")
        want = ["shorter than its 8-byte header length"]
    elif case == "truncated":
        _raw(f, header, data[:-100])
        want = ["(truncated?)"]
    elif case == "overlap":
        header["fc1.bias"]["data_offsets"] = header["fc1.weight"]["data_offsets"][0:1] * 2
        header["fc1.bias"]["data_offsets"][1] += 32 * 4
        _raw(f, header, data)
        want = ["overlap"]
    elif case == "unknown_dtype":
        header["fc1.bias"]["dtype"] = "F7"
        _raw(f, header, data)
        want = ["tensor 'fc1.bias'", "unknown dtype 'F7'"]
    elif case == "span_mismatch":
        header["fc1.bias"]["shape"] = [31]
        _raw(f, header, data)
        want = ["tensor 'fc1.bias'", "need 124"]
    elif case == "negative_shape":
        header["fc1.bias"]["shape"] = [-32]
        _raw(f, header, data)
        want = ["tensor 'fc1.bias'", "non-negative integer"]
    elif case == "offsets_reversed":
        b, e = header["fc1.bias"]["data_offsets"]
        header["fc1.bias"]["data_offsets"] = [e, b]
        _raw(f, header, data)
        want = ["tensor 'fc1.bias'", "begin after they end"]
    else:
        _raw(f, header, data)
        g = _raw(tmp_path / "w2.safetensors", {"fc1.bias": header["fc1.bias"]}, data)
        files = [f, g]
        want = ["tensor 'fc1.bias'", "also in"]
    _fails(tmp_path, files, "w.safetensors" if case != "duplicate_across_files" else "w",
           *want)


def test_overlap_detects_partial_overlap(tmp_path):
    header, data = _good_header()
    b, e = header["fc2.bias"]["data_offsets"]
    header["fc2.bias"]["data_offsets"] = [b - 4, e - 4]  # into the previous tensor
    _fails(tmp_path, [_raw(tmp_path / "w.safetensors", header, data)], "overlap")


# ---- sharded external data ------------------------------------------------------------------

def test_sharded_external_data(tmp_path, reference):
    real, _ = reference
    path = _out(tmp_path)
    r = _export(_empty(), path, weights=real.state_dict(), external_data="shards:5KB")
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    locations = {}
    for init in m.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in init.external_data}
            assert int(info.get("offset", 0)) % 4096 == 0
            locations.setdefault(info["location"], []).append(int(info["length"]))
    names = sorted(locations)
    assert "model.onnx.data" in names and "model.onnx.1.data" in names
    assert len(names) == len(r.data_paths) > 2
    for name, lengths in locations.items():
        size = os.path.getsize(path.parent / name)
        # At most 5 kB per file unless one tensor alone is larger.
        assert size <= 5000 or len(lengths) == 1, (name, size, lengths)
    # Every weight's bytes are where the model says (onnx reads them back) ...
    full = onnx.load(str(path))
    want = onnx.load(_export(real, _out(tmp_path, "one")).path)
    got = {i.name: onnx.numpy_helper.to_array(i) for i in full.graph.initializer}
    for i in want.graph.initializer:
        np.testing.assert_array_equal(got[i.name], onnx.numpy_helper.to_array(i))
    # ... and onnxruntime runs it.
    _check_ort(path, real)
    # Exported again to the same path: the old shards are removed after the commit.
    r2 = _export(real, path, external_data="shards:5KB")
    left = sorted(p for p in os.listdir(path.parent) if p.endswith(".data"))
    assert left == sorted(os.path.basename(p) for p in r2.data_paths)


@pytest.mark.parametrize("bad", ["shards:", "shards:2XB", "shards:100", "shard:2GB", "2GB"])
def test_bad_shard_sizes(tmp_path, bad):
    with pytest.raises(TypeError, match="external_data must be"):
        _export(_real(), tmp_path / "m.onnx", external_data=bad)


@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_large_weights_stream_intact(tmp_path, dtype):
    """Weights large enough to fill the writer's 8 MiB buffers many times,
    transposed and (float16) converted while streamed, some at offsets the
    kernel copy leaves unaligned: every byte read back equals the weight."""
    import onnx
    from onnx import numpy_helper

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(1024, 3000), nn.ReLU(), nn.Linear(3000, 1000)).eval()
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    sd["0.bias"] = torch.randn(3000)  # a 12000-byte tensor: the next starts after padding
    m.load_state_dict(sd)
    save_file(sd, tmp_path / "w.safetensors")
    with pt2onnx.init_empty_weights():
        empty = nn.Sequential(nn.Linear(1024, 3000), nn.ReLU(), nn.Linear(3000, 1000)).eval()
    path = _out(tmp_path)
    x = torch.randn(2, 5, 1024)
    pt2onnx.export(empty, (x,), str(path), weights=tmp_path / "w.safetensors", dtype=dtype)
    got = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    want = {"0.weight.T": sd["0.weight"].T, "2.weight.T": sd["2.weight"].T,
            "0.bias": sd["0.bias"], "2.bias": sd["2.bias"]}
    for name, w in want.items():
        w = w.numpy() if dtype is None else w.half().numpy()
        np.testing.assert_array_equal(got[name], w, err_msg=name)


# Models built on the meta device (`with torch.device("meta")`, as accelerate's
# init_empty_weights and transformers build them): exported with weights= as the
# ones built under pt2onnx.init_empty_weights(); every buffer without data must
# come from weights= too.

def _meta():
    with torch.device("meta"):
        return Net().eval()


def test_meta_device_model(tmp_path, reference):
    real, want = reference
    m = _meta()
    assert all(t.is_meta for t in [*m.parameters(), *m.buffers()])
    # The computed `freq` is on the meta device too: the weights give it.
    path = _out(tmp_path)
    r = _export(m, path, weights=dict(_checkpoint_dict(real), freq=real.freq))
    assert _files(r) == want
    _check_ort(path, real)
    # The model is left as it was built: still on the meta device, still tied.
    assert all(t.is_meta for t in [*m.parameters(), *m.buffers()])
    assert m.head.weight is m.emb.weight


def test_meta_device_sequential_from_safetensors(tmp_path):
    """The issue's case: two Linears built on the meta device, their weights in
    a safetensors file; checked in onnxruntime at another batch size."""
    torch.manual_seed(0)
    real = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    save_file(real.state_dict(), tmp_path / "model.safetensors")
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    path = tmp_path / "seq.onnx"
    pt2onnx.export(m, (torch.randn(2, 8),), str(path), weights=tmp_path / "model.safetensors",
                   dynamic_shapes=({0: torch.export.Dim("batch")},))
    x = torch.randn(5, 8)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, real(x).numpy(), atol=1e-5, rtol=1e-5)


def test_meta_buffer_missing_from_the_weights_is_named_with_the_fix(tmp_path):
    # A checkpoint as save_pretrained writes it: the computed `freq` is not in it.
    save_file(_checkpoint_dict(_real()), tmp_path / "model.safetensors")
    msg = _fails(tmp_path, tmp_path / "model.safetensors",
                 "buffer 'freq' is on the meta device and weights= does not hold it",
                 "pt2onnx.init_empty_weights()", model=_meta())
    assert "Expected all tensors" not in msg and "\n" not in msg
    # Without weights= at all: the first weight without data is named, as for fake ones.
    with pytest.raises(ValueError, match="has no data to export .* pass weights="):
        _export(_meta(), tmp_path / "none.onnx")


def test_meta_device_llama_rotary_buffer_is_named(tmp_path):
    """transformers' LLaMA built on the meta device: its rotary inv_freq is
    computed at init and no checkpoint holds it; the error names it and the
    fix. Built under pt2onnx.init_empty_weights() instead, the same
    checkpoint exports."""
    from pt2onnx import hf

    hf.prepare()
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).eval().save_pretrained(str(tmp_path / "ckpt"))
    ids = torch.randint(0, 64, (1, 6))
    with torch.device("meta"):
        meta = LlamaForCausalLM(cfg).eval()
    path = tmp_path / "out" / "model.onnx"
    path.parent.mkdir()
    with pytest.raises(ValueError) as e:
        pt2onnx.export(meta, (ids,), str(path), weights=tmp_path / "ckpt")
    assert "rotary_emb.inv_freq' is on the meta device" in str(e.value), str(e.value)
    assert os.listdir(path.parent) == []
    with pt2onnx.init_empty_weights():
        empty = LlamaForCausalLM(cfg).eval()
    pt2onnx.export(empty, (ids,), str(path), weights=tmp_path / "ckpt")
    assert path.exists()
