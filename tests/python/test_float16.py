"""export(dtype=torch.float16 / torch.bfloat16): weights, inputs, outputs and
compute in float16, norm statistics / softmax / sums kept in float32
(src/opt/convert_float16.cpp), compared with PyTorch run in float32.

Tolerances: float16 keeps 11 significant bits (a relative step of 9.8e-4);
rounding the weights, the inputs and every float16 intermediate of these
small models (outputs of order 1) gave max abs errors of 2e-4..6e-4 (conv
net, LayerNorm MLP, LLaMA logits and KV cache) and 1.4e-3..2.4e-3 (BERT's
hidden states, of order 1-3). atol = rtol = 1e-2 leaves 4-50x room for other
seeds and shapes, and is still exceeded where precision is lost (the LLaMA
KV cache with float16 rotary angles at position 3000 fails it).
bfloat16 keeps 8 bits (7.8e-3): 5e-2."""

import subprocess

import numpy as np
import onnx
import pytest
import torch
from conftest import cli_path, ort_session

import pt2onnx
from pt2onnx import hf

ATOL16 = RTOL16 = 1e-2
ATOL_BF16 = RTOL_BF16 = 5e-2


def _initializer_bytes(path):
    m = onnx.load(path)  # external data loaded too
    total = {}
    for t in m.graph.initializer:
        nbytes = len(onnx.numpy_helper.to_array(t).tobytes())
        total[t.data_type] = total.get(t.data_type, 0) + nbytes
    return total


def _float32_values(path):
    """Names of the float32 values (shape inference on the file)."""
    m = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True)
    vals = list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)
    names = {v.name for v in vals if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    return names | {t.name for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}


def _check_file(path):
    onnx.checker.check_model(onnx.load(path), full_check=True)


def _compare(path, model, inputs, atol=ATOL16, rtol=RTOL16):
    sess = ort_session(path)
    feeds = {}
    for i, x in zip(sess.get_inputs(), inputs):
        x = x.numpy()
        feeds[i.name] = x.astype(np.float16) if i.type == "tensor(float16)" else x
    got = sess.run(None, feeds)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), e.numpy(), atol=atol, rtol=rtol)
        worst = max(worst, float(np.abs(g.astype(np.float64) - e.numpy()).max()))
    return worst


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 32, 3, padding=1),
            torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        return torch.softmax(self.fc(self.features(x).flatten(1)), -1) * 10


class LayerNormMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 256)
        self.norm = torch.nn.LayerNorm(256)
        self.fc2 = torch.nn.Linear(256, 16)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def _randomize_bn(model):
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


@pytest.mark.parametrize("opset", [13, 18])
def test_conv_net(tmp_path, opset):
    model = _randomize_bn(ConvNet())
    x = torch.randn(2, 3, 16, 16)
    ds = ({0: "batch"},)
    f32, f16 = str(tmp_path / "f32.onnx"), str(tmp_path / "f16.onnx")
    pt2onnx.export(model, (x,), f32, dynamic_shapes=ds, opset=opset)
    pt2onnx.export(model, (x,), f16, dynamic_shapes=ds, opset=opset, dtype=torch.float16)
    _check_file(f16)
    b32, b16 = _initializer_bytes(f32), _initializer_bytes(f16)
    # Every float32 weight written in half the bytes, but scalars read only
    # in float32 (the softmax's * 10).
    kept32 = b16.get(onnx.TensorProto.FLOAT, 0)
    assert kept32 <= 16
    assert b16[onnx.TensorProto.FLOAT16] + kept32 // 2 == b32[onnx.TensorProto.FLOAT] // 2
    # Softmax and the global average pool's mean (a ReduceMean) run in float32.
    m = onnx.load(f16)
    f32_values = _float32_values(f16)
    sensitive = [n for n in m.graph.node if n.op_type in ("Softmax", "ReduceMean")]
    assert sensitive and all(n.input[0] in f32_values for n in sensitive)
    assert all(n.input[0] not in f32_values for n in m.graph.node if n.op_type == "Conv")
    torch.manual_seed(1)
    _compare(f16, model, (torch.randn(5, 3, 16, 16),))


@pytest.mark.parametrize("opset", [13, 18])
def test_mlp_with_layer_norm(tmp_path, opset):
    torch.manual_seed(0)
    model = LayerNormMLP().eval()
    f = str(tmp_path / "m.onnx")
    r = pt2onnx.export(model, (torch.randn(3, 32),), f, opset=opset, dtype=torch.float16,
                       dynamic_shapes=({0: "n"},), verify=True)
    assert r.checks["verify"]  # ran at export's own float16 tolerance
    _check_file(f)
    m = onnx.load(f)
    ops = [n.op_type for n in m.graph.node]
    f32_values = _float32_values(f)
    if opset >= 17:
        ln = [n for n in m.graph.node if n.op_type == "LayerNormalization"]
        assert len(ln) == 1 and ln[0].input[0] not in f32_values
        assert {a.name: a.i for a in ln[0].attribute}.get("stash_type", 1) == 1
    else:
        # The hand-written norm: its two means (and the squares under the
        # variance's) computed in float32.
        means = [n for n in m.graph.node if n.op_type == "ReduceMean"]
        assert len(means) == 2 and all(n.input[0] in f32_values and n.output[0] in f32_values
                                       for n in means)
        assert "Pow" not in ops or all(n.output[0] in f32_values
                                       for n in m.graph.node if n.op_type == "Pow")
    assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert m.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    torch.manual_seed(1)
    _compare(f, model, (torch.randn(9, 32) * 3,))


def test_float32_path_unchanged(tmp_path):
    model = LayerNormMLP().eval()
    x = torch.randn(3, 32)
    paths = [str(tmp_path / f"{i}.onnx") for i in range(3)]
    pt2onnx.export(model, (x,), paths[0], external_data=False)
    pt2onnx.export(model, (x,), paths[1], external_data=False, dtype=torch.float32)
    pt2onnx.export(model, (x,), paths[2], external_data=False, dtype="float32")
    data = [open(p, "rb").read() for p in paths]
    assert data[0] == data[1] == data[2]


def test_dtype_errors(tmp_path):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="dtype must be torch.float32"):
        pt2onnx.export(model, (torch.randn(1, 2),), str(tmp_path / "m.onnx"), dtype=torch.int8)
    with pytest.raises(ValueError, match="dtype must be"):
        pt2onnx.export(model, (torch.randn(1, 2),), str(tmp_path / "m.onnx"), dtype="half")


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("target", ["standard", "onnxruntime"])
def test_module_functions(optimize, target, tmp_path):
    """float16 with the module calls kept as functions (refused before issue
    34): each body converted on its own, float16 across every call."""
    import onnx

    torch.manual_seed(0)
    model = LayerNormMLP().eval()
    f = str(tmp_path / "m.onnx")
    pt2onnx.export(model, (torch.randn(3, 32),), f, dtype=torch.float16, optimize=optimize,
                   target=target, export_modules_as_functions=True)
    m = onnx.load(f)
    assert m.functions, "no function written"
    assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    _compare(f, model, (torch.randn(3, 32),))


def test_without_optimize(tmp_path):
    torch.manual_seed(0)
    model = LayerNormMLP().eval()
    f = str(tmp_path / "m.onnx")
    pt2onnx.export(model, (torch.randn(3, 32),), f, dtype=torch.float16, optimize=False)
    _check_file(f)
    _compare(f, model, (torch.randn(3, 32),))


def test_bfloat16_valid_and_matches_in_reference_evaluator(tmp_path):
    """onnxruntime 1.32's CPU provider has no bfloat16 Gemm / MatMul kernels
    (session creation fails with NOT_IMPLEMENTED), so the bfloat16 file is
    checked with onnx.checker and run by onnx's reference evaluator."""
    import ml_dtypes
    from onnx.reference import ReferenceEvaluator

    torch.manual_seed(0)
    model = LayerNormMLP().eval()
    f = str(tmp_path / "m.onnx")
    pt2onnx.export(model, (torch.randn(3, 32),), f, opset=18, dtype=torch.bfloat16,
                   dynamic_shapes=({0: "n"},))
    _check_file(f)
    m = onnx.load(f)
    assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    w = [t for t in m.graph.initializer if t.name == "fc1.weight"]
    assert w and w[0].data_type == onnx.TensorProto.BFLOAT16
    x = torch.randn(5, 32)
    (got,) = ReferenceEvaluator(m).run(None, {"x": x.numpy().astype(ml_dtypes.bfloat16)})
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(got.astype(np.float32), expected, atol=ATOL_BF16, rtol=RTOL_BF16)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    hf.prepare()
    import transformers as tr

    cfg = tr.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                         max_position_embeddings=128)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("llama")
    tr.LlamaForCausalLM(cfg).eval().save_pretrained(d)
    return d


def test_llama_with_past(llama_dir, tmp_path):
    f = str(tmp_path / "llama.onnx")
    task = "text-generation-with-past"
    # Verified inside at the float16 tolerance (atol = rtol = 1e-2): logits
    # and the float16 KV cache against the float32 model, prefill and decode.
    r = hf.export_pretrained(llama_dir, task, f, dtype=torch.float16)
    assert r.checks["max_abs_error"] < ATOL16
    _check_file(f)
    m = onnx.load(f)
    ins = {i.name: i.type.tensor_type.elem_type for i in m.graph.input}
    assert ins["past_key_values.0.key"] == onnx.TensorProto.FLOAT16
    outs = {o.name: o.type.tensor_type.elem_type for o in m.graph.output}
    assert outs["logits"] == outs["present.1.value"] == onnx.TensorProto.FLOAT16
    # Weight bytes: every float weight float16, half the checkpoint's float32 bytes.
    model = hf.load_pretrained(llama_dir, task)
    state = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    bytes_f16 = _initializer_bytes(f)
    assert onnx.TensorProto.FLOAT16 in bytes_f16
    total32 = sum(v.numel() * 4 for k, v in state.items() if "rotary" not in k)
    big16 = bytes_f16[onnx.TensorProto.FLOAT16]
    assert abs(big16 - total32 // 2) < 0.01 * total32
    # RMS norm statistics, softmax and the rotary angles run in float32.
    f32_values = _float32_values(f)
    for n in m.graph.node:
        if n.op_type in ("ReduceSum", "ReduceMean", "Softmax", "Cos", "Sin"):
            assert n.input[0] in f32_values, n.name
    # Far positions: a float16 rotary angle (position * inv_freq) would be off
    # by up to 2 radians at 3000; computed in float32 the logits still agree.
    inputs = hf._TaskInputs(model, task)
    sess = ort_session(f)
    torch.manual_seed(2)
    for batch, seq, past in [(1, 6, 0), (2, 1, 9)]:
        kw = inputs.make(batch, seq, past)
        kw["position_ids"] = kw["position_ids"] + 3000
        run = hf._verify_mod._compare(sess, model, (), kw, ATOL16, RTOL16)
        assert "failures" not in run, run


@pytest.mark.parametrize("opset", [13, 18])
def test_bert(tmp_path, opset):
    hf.prepare()
    import transformers as tr

    cfg = tr.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, vocab_size=512, max_position_embeddings=64)
    torch.manual_seed(0)
    d = tmp_path / "bert"
    tr.BertModel(cfg).eval().save_pretrained(d)
    f = str(tmp_path / "bert.onnx")
    r = hf.export_pretrained(d, "feature-extraction", f, opset=opset, dtype=torch.float16)
    assert r.checks["max_abs_error"] < ATOL16
    _check_file(f)
    m = onnx.load(f)
    f32_values = _float32_values(f)
    softmax = [n for n in m.graph.node if n.op_type == "Softmax"]
    assert len(softmax) == 2 and all(n.input[0] in f32_values for n in softmax)
    # Fresh inputs: longer sequences, padding in the mask.
    model = hf.load_pretrained(d, "feature-extraction")
    torch.manual_seed(3)
    ids = torch.randint(0, 512, (3, 40))
    mask = torch.ones(3, 40, dtype=torch.int64)
    mask[1, 25:] = 0
    tt = torch.zeros(3, 40, dtype=torch.int64)
    sess = ort_session(f)
    names = [i.name for i in sess.get_inputs()]
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}
    got = sess.run(None, {n: feeds[n].numpy() for n in names})
    with torch.no_grad():
        expected = model(**{n: feeds[n] for n in names})
    np.testing.assert_allclose(got[0].astype(np.float32), expected.last_hidden_state.numpy(),
                               atol=ATOL16, rtol=RTOL16)


def test_commands(llama_dir, tmp_path):
    model = LayerNormMLP().eval()
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 32),)), pt2)
    out = tmp_path / "m.onnx"
    r = subprocess.run([cli_path(), str(pt2), "-o", str(out), "--dtype", "float16"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _check_file(str(out))
    _compare(str(out), model, (torch.randn(2, 32),))
    bad = subprocess.run([cli_path(), str(pt2), "-o", str(out), "--dtype", "half"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--dtype must be float32, float16 or bfloat16" in bad.stderr

    f = tmp_path / "llama.onnx"
    assert hf.main([str(llama_dir), "--task", "text-generation", "-o", str(f),
                    "--dtype", "float16"]) == 0
    m = onnx.load(str(f))
    assert m.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
