"""Inputs and outputs of any pytree shape (nested tuples / lists / dicts,
ModelOutput-like classes, namedtuples, None) and Python scalars as inputs:
names asserted exactly, every model run in onnxruntime on inputs other than
the export inputs and compared with PyTorch, and the .pt2 command path
checked byte for byte (assert_same_both_ways)."""

import collections
import os
import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.utils._pytree as pytree
from conftest import assert_same_both_ways, ort_session

import pt2onnx

Dim = torch.export.Dim


def names(path):
    s = ort_session(path)
    return [i.name for i in s.get_inputs()], [o.name for o in s.get_outputs()]


def run(path, feeds):
    s = ort_session(path)
    return s.run(None, {k: (v.numpy() if isinstance(v, torch.Tensor) else v)
                        for k, v in feeds.items()})


def tensor_leaves(out):
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def check(got, expected):
    exp = tensor_leaves(expected)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        assert g.shape == tuple(e.shape)
        tol = 2e-3 if e.dtype == torch.float16 else 1e-5  # fp16: one rounding apart
        np.testing.assert_allclose(g, e.detach().numpy(), atol=tol, rtol=tol)


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, past, cache, *, extra):
        h = self.lin(x)
        (k0, v0), (k1, v1) = past
        return {
            "logits": h + cache["key"],
            "present": [(k0 + h, v0 * 2), (k1 - h, v1 + extra[0])],
        }


def nested_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda: torch.randn(batch, 4, generator=g)  # noqa: E731
    return (r(), ((r(), r()), (r(), r())), {"key": r()}), {"extra": [r()]}


def nested_feeds(args, kwargs):
    x, ((k0, v0), (k1, v1)), cache = args
    return {"x": x, "past.0.0": k0, "past.0.1": v0, "past.1.0": k1, "past.1.1": v1,
            "cache.key": cache["key"], "extra.0": kwargs["extra"][0]}


def test_nested_inputs_positional_and_kwargs_dict_output(tmp_onnx):
    m = Nested().eval()
    args, kwargs = nested_inputs()
    pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs)
    ins, outs = names(tmp_onnx)
    assert ins == ["x", "past.0.0", "past.0.1", "past.1.0", "past.1.1", "cache.key", "extra.0"]
    assert outs == ["logits", "present.0.0", "present.0.1", "present.1.0", "present.1.1"]
    args2, kwargs2 = nested_inputs(seed=1)
    check(run(tmp_onnx, nested_feeds(args2, kwargs2)), m(*args2, **kwargs2))
    assert_same_both_ways(m, args, tmp_onnx, kwargs=kwargs)


def test_dynamic_batch_on_nested_input(tmp_onnx):
    m = Nested().eval()
    args, kwargs = nested_inputs(batch=3)
    b = Dim("batch")
    ds = {"x": {0: b}, "past": (({0: b}, {0: b}), ({0: b}, {0: b})), "cache": {"key": {0: b}},
          "extra": [{0: b}]}
    pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs, dynamic_shapes=ds)
    s = ort_session(tmp_onnx)
    for i in s.get_inputs():
        assert i.shape == ["batch", 4], (i.name, i.shape)
    for o in s.get_outputs():
        assert o.shape == ["batch", 4], (o.name, o.shape)
    args2, kwargs2 = nested_inputs(batch=5, seed=2)
    check(run(tmp_onnx, nested_feeds(args2, kwargs2)), m(*args2, **kwargs2))
    assert_same_both_ways(m, args, tmp_onnx, kwargs=kwargs, dynamic_shapes=ds)


class WithNones(torch.nn.Module):
    def forward(self, x, mask, y):
        z = x if mask is None else x * mask
        return z + y, None, [None, (z * 2, None)]


def test_none_inputs_and_outputs_are_dropped(tmp_onnx):
    m = WithNones()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    pt2onnx.export(m, (x, None, y), tmp_onnx)
    ins, outs = names(tmp_onnx)
    assert ins == ["x", "y"]
    assert outs == ["add", "output_2.1.0"]
    x2, y2 = torch.randn(2, 3), torch.randn(2, 3)
    check(run(tmp_onnx, {"x": x2, "y": y2}), m(x2, None, y2))
    assert_same_both_ways(m, (x, None, y), tmp_onnx)


class FakeModelOutput(collections.OrderedDict):
    """What transformers' ModelOutput is to pytree: an OrderedDict subclass
    registered as a node, its keys the context."""


pytree.register_pytree_node(
    FakeModelOutput,
    lambda o: (list(o.values()), list(o.keys())),
    lambda values, keys: FakeModelOutput(zip(keys, values)),
    serialized_type_name="test_pytree_io.FakeModelOutput",
    flatten_with_keys_fn=lambda o: ([(pytree.MappingKey(k), v) for k, v in o.items()],
                                    list(o.keys())),
)


class ReturnsModelOutput(torch.nn.Module):
    def forward(self, x):
        return FakeModelOutput(logits=x.softmax(-1), hidden_states=(x + 1, x * 3),
                               past_key_values=({"key": x - 1, "value": x.exp()},))


def test_model_output_like_names_by_key(tmp_onnx):
    m = ReturnsModelOutput()
    x = torch.randn(2, 5)
    pt2onnx.export(m, (x,), tmp_onnx)
    ins, outs = names(tmp_onnx)
    assert ins == ["x"]
    assert outs == ["logits", "hidden_states.0", "hidden_states.1", "past_key_values.0.key",
                    "past_key_values.0.value"]
    x2 = torch.randn(2, 5)
    check(run(tmp_onnx, {"x": x2}), m(x2))
    assert_same_both_ways(m, (x,), tmp_onnx)


Pair = collections.namedtuple("Pair", ["first", "second"])
RegisteredPair = collections.namedtuple("RegisteredPair", ["first", "second"])
pytree._register_namedtuple(RegisteredPair, serialized_type_name="test_pytree_io.RegisteredPair")


class ReturnsNamedTuple(torch.nn.Module):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def forward(self, x):
        return self.cls(x + 1, (x * 2, torch.max(x, dim=1)))


def test_namedtuples_and_return_types_are_positional(tmp_onnx):
    # An unregistered namedtuple and torch.return_types (no serialization
    # name) export as tuples; a registered one gives the same names.
    x = torch.randn(3, 4)
    x2 = torch.randn(3, 4)
    m = ReturnsNamedTuple(Pair)
    pt2onnx.export(m, (x,), tmp_onnx)
    expected = ["add", "output_1.0", "output_1.1.0", "output_1.1.1"]
    assert names(tmp_onnx) == (["x"], expected)
    check(run(tmp_onnx, {"x": x2}), m(x2))
    reg = ReturnsNamedTuple(RegisteredPair)
    path = tmp_onnx.replace(".onnx", "_registered.onnx")
    pt2onnx.export(reg, (x,), path)
    assert names(path) == (["x"], expected)
    check(run(path, {"x": x2}), reg(x2))


def test_input_and_output_names_name_the_flat_leaves(tmp_onnx):
    m = Nested().eval()
    args, kwargs = nested_inputs()
    in_names = ["a", "k0", "v0", "k1", "v1", "ck", "e"]
    out_names = ["o", "p0", "p1", "p2", "p3"]
    pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs, input_names=in_names,
                   output_names=out_names)
    assert names(tmp_onnx) == (in_names, out_names)
    args2, kwargs2 = nested_inputs(seed=3)
    feeds = dict(zip(in_names, nested_feeds(args2, kwargs2).values()))
    check(run(tmp_onnx, feeds), m(*args2, **kwargs2))
    # Fewer names than leaves name the first ones.
    pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs, input_names=["a"], output_names=["o"])
    ins, outs = names(tmp_onnx)
    assert ins[:2] == ["a", "past.0.0"] and outs[:2] == ["o", "present.0.0"]
    # Names past the inputs name the weights (torch.onnx's rule); more than both fail.
    with pytest.raises(ValueError, match="input_names has 507 names"):
        pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs,
                       input_names=in_names + [f"z{i}" for i in range(500)])


class Scalars(torch.nn.Module):
    def forward(self, x, n, scale, offset=0):
        y = x[:, :n] * scale + offset  # n: a slice bound; scale, offset: operands
        return y, torch.zeros(n, 2) + n, y.reshape(-1, n).sum(0)


def test_scalar_int_and_float_inputs_take_new_values(tmp_onnx):
    m = Scalars()
    x = torch.randn(3, 8)
    args = (x, 4, 0.5)
    kwargs = {"offset": 2}
    pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs)
    s = ort_session(tmp_onnx)
    inputs = {i.name: (i.type, i.shape) for i in s.get_inputs()}
    assert inputs == {"x": ("tensor(float)", [3, 8]), "n": ("tensor(int64)", []),
                      "scale": ("tensor(float)", []), "offset": ("tensor(int64)", [])}
    # Dims computed from an int input are named after it.
    assert [o.shape for o in s.get_outputs()] == [[3, "n"], ["n", 2], ["n"]]
    x2 = torch.randn(3, 8)
    for n, scale, offset in [(4, 0.5, 2), (2, -1.25, 7), (8, 3.0, -1)]:
        got = run(tmp_onnx, {"x": x2, "n": np.array(n, np.int64),
                             "scale": np.array(scale, np.float32),
                             "offset": np.array(offset, np.int64)})
        check(got, m(x2, n, scale, offset=offset))
    assert_same_both_ways(m, args, tmp_onnx, kwargs=kwargs)


class NestedScalar(torch.nn.Module):
    def forward(self, x, cfg):
        return x * cfg["alpha"] + cfg["shift"][0]


def test_scalars_inside_nested_inputs(tmp_onnx):
    m = NestedScalar()
    x = torch.randn(2, 3)
    args = (x, {"alpha": 1.5, "shift": [3]})
    pt2onnx.export(m, args, tmp_onnx)
    assert names(tmp_onnx)[0] == ["x", "cfg.alpha", "cfg.shift.0"]
    x2 = torch.randn(2, 3)
    got = run(tmp_onnx, {"x": x2, "cfg.alpha": np.array(-2.0, np.float32),
                         "cfg.shift.0": np.array(5, np.int64)})
    check(got, m(x2, {"alpha": -2.0, "shift": [5]}))
    assert_same_both_ways(m, args, tmp_onnx)


class BoolFlag(torch.nn.Module):
    def forward(self, x, flag):
        return x * 2 if flag else x - 1


def test_bool_input_is_a_constant_with_a_warning(tmp_onnx):
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match="input 'flag' is a bool: it is exported as the "
                                         "constant True"):
        pt2onnx.export(BoolFlag(), (x, True), tmp_onnx)
    assert names(tmp_onnx)[0] == ["x"]
    x2 = torch.randn(2, 3)
    check(run(tmp_onnx, {"x": x2}), BoolFlag()(x2, True))


class BoolData(torch.nn.Module):
    def forward(self, x, flag):
        return torch.where(torch.tensor(flag), x * 2, x - 1) + flag


def test_bool_used_as_data_is_an_input(tmp_onnx):
    """A bool the model computes with (not branches on) is a 0-d bool input
    that honours the other value at run time."""
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no constant-bool warning
        pt2onnx.export(BoolData(), (x, True), tmp_onnx)
    assert names(tmp_onnx)[0] == ["x", "flag"]
    m = onnx.load(tmp_onnx)
    assert m.graph.input[1].type.tensor_type.elem_type == onnx.TensorProto.BOOL
    assert len(m.graph.input[1].type.tensor_type.shape.dim) == 0
    x2 = torch.randn(2, 3)
    for flag in (False, True):
        check(run(tmp_onnx, {"x": x2, "flag": torch.tensor(flag)}), BoolData()(x2, flag))


def test_plain_tensor_names_unchanged(tmp_onnx):
    class Plain(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a * b

    a, b = torch.randn(2), torch.randn(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no scalar / bool warning for tensors
        pt2onnx.export(Plain(), (a, b), tmp_onnx)
    assert names(tmp_onnx) == (["a", "b"], ["add", "mul"])


def test_guide_example(tmp_path, monkeypatch):
    """The guide's nested inputs and outputs example prints the names it shows."""
    import doc_blocks

    page = "docs/guides/modules.md"
    code = doc_blocks.section_code(page, "Inputs and outputs: nested structures and scalars")
    monkeypatch.chdir(tmp_path)
    printed = []
    env = {"print": lambda *a: printed.append(a[0])}
    exec(compile(code, page, "exec"), env)
    assert printed[0] == ["x", "past.0.0", "past.0.1", "n", "scale"]
    assert printed[1] == ["logits", "present.0.0", "present.0.1"]
    assert printed[2] == (2, 3)
    m, x, k, v = env["M"](), env["x"], env["k"], env["v"]
    check(env["out"], m(x, [(k, v)], 3, 2.0))


class LoopBound(torch.nn.Module):
    def forward(self, x, n):
        for i in range(n):  # Python control flow on n: torch.export must specialize it
            x = x + i
        return x


def test_scalar_the_python_code_depends_on_is_a_constant_with_a_warning(tmp_onnx):
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match="int / float inputs are exported as constants"):
        pt2onnx.export(LoopBound(), (x, 3), tmp_onnx)
    assert names(tmp_onnx)[0] == ["x"]
    x2 = torch.randn(2, 3)
    check(run(tmp_onnx, {"x": x2}), LoopBound()(x2, 3))


def test_dynamic_axes_name_nested_inputs_by_flattened_name(tmp_onnx):
    m = Nested().eval()
    args, kwargs = nested_inputs(batch=3)
    axes = {n: {0: "batch"} for n in ["x", "past.0.0", "past.0.1", "past.1.0", "past.1.1",
                                      "cache.key", "extra.0"]}
    pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs, dynamic_axes=axes)
    s = ort_session(tmp_onnx)
    assert [i.shape for i in s.get_inputs()] == [["batch", 4]] * 7
    args2, kwargs2 = nested_inputs(batch=6, seed=4)
    check(run(tmp_onnx, nested_feeds(args2, kwargs2)), m(*args2, **kwargs2))
    with pytest.raises(ValueError, match=r"names no input or output: \['past.2.0'\]"):
        pt2onnx.export(m, args, tmp_onnx, kwargs=kwargs, dynamic_axes={"past.2.0": [0]})


def test_transformers_model_output(tmp_onnx):
    # A real ModelOutput (CausalLMOutputWithPast): leaves named by key, the
    # None past_key_values dropped, bool flags constants (with a warning).
    from opinfo_harness import hide_torchvision_ops

    hide_torchvision_ops()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
    m = LlamaForCausalLM(cfg).eval()
    kwargs = {"input_ids": torch.randint(0, 128, (2, 7)), "use_cache": False,
              "output_hidden_states": True}
    with pytest.warns(UserWarning, match="input 'use_cache' is a bool"):
        pt2onnx.export(m, (), tmp_onnx, kwargs=kwargs)
    assert names(tmp_onnx) == (["input_ids"], ["logits", "hidden_states.0", "hidden_states.1",
                                               "hidden_states.2"])
    ids = torch.randint(0, 128, (2, 7))
    with torch.no_grad():
        expected = m(input_ids=ids, use_cache=False, output_hidden_states=True)
    got = run(tmp_onnx, {"input_ids": ids})
    assert len(got) == 4
    for g, e in zip(got, [expected.logits, *expected.hidden_states]):
        np.testing.assert_allclose(g, e.numpy(), atol=1e-4, rtol=1e-4)


class IntOutputs(torch.nn.Module):
    def forward(self, x, n):
        return {"y": x * n, "len": x.shape[0], "n1": n + 1, "k": 7,
                "dims": [x.shape[1], x.shape[0] * 2]}


def test_int_outputs_are_0d_int64(tmp_onnx):
    m = IntOutputs()
    x = torch.randn(3, 4)
    ds = {"x": {0: Dim("b")}, "n": None}  # None: the int stays an input (Dim.STATIC: a constant)
    pt2onnx.export(m, (x, 2), tmp_onnx, dynamic_shapes=ds)
    s = ort_session(tmp_onnx)
    assert [(o.name, o.type, o.shape) for o in s.get_outputs()] == [
        ("y", "tensor(float)", ["b", 4]), ("len", "tensor(int64)", []),
        ("n1", "tensor(int64)", []), ("k", "tensor(int64)", []),
        ("dims.0", "tensor(int64)", []), ("dims.1", "tensor(int64)", [])]
    x2 = torch.randn(5, 4)
    got = run(tmp_onnx, {"x": x2, "n": np.array(3, np.int64)})
    exp = m(x2, 3)
    np.testing.assert_allclose(got[0], exp["y"].numpy(), rtol=1e-6)
    assert [int(g) for g in got[1:]] == [5, 4, 7, 4, 10]
    assert_same_both_ways(m, (x, 2), tmp_onnx, dynamic_shapes=ds)


def test_dim_static_keeps_an_int_constant(tmp_onnx):
    class Mul(torch.nn.Module):
        def forward(self, x, n):
            return x * n

    x = torch.randn(3, 4)
    pt2onnx.export(Mul(), (x, 2), tmp_onnx, dynamic_shapes={"x": None, "n": Dim.STATIC})
    assert names(tmp_onnx)[0] == ["x"]
    check(run(tmp_onnx, {"x": x}), Mul()(x, 2))


class FloatUses(torch.nn.Module):
    def forward(self, x, i, f):
        return x.half() * f, i * f, x.double() + f, torch.full((2,), f)


def test_float_input_keeps_torch_type_promotion(tmp_onnx):
    # A Python float promotes like a scalar (not a 0-d float32 tensor): the
    # output dtypes are torch's.
    x, i = torch.randn(3), torch.arange(3)
    pt2onnx.export(FloatUses(), (x, i, 0.25), tmp_onnx)
    s = ort_session(tmp_onnx)
    assert [o.type for o in s.get_outputs()] == ["tensor(float16)", "tensor(float)",
                                                 "tensor(double)", "tensor(float)"]
    x2 = torch.randn(3)
    check(run(tmp_onnx, {"x": x2, "i": i, "f": np.array(-1.5, np.float32)}),
          FloatUses()(x2, i, -1.5))
    assert_same_both_ways(FloatUses(), (x, i, 0.25), tmp_onnx)
