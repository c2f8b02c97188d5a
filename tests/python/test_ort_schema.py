"""target="onnxruntime" writes onnxruntime's contrib operators, which
onnx.checker does not know: every such node is checked here against the
schemas of the pinned onnxruntime (get_all_operator_schema()): the operator
exists in that domain at the imported version, required inputs are given,
no more inputs / outputs than the schema has, and only attributes it
declares. The models are real definitions (transformers, random weights) and
each file also runs in onnxruntime against PyTorch."""

import onnx
import pytest
import torch

import pt2onnx
from pt2onnx import hf
from conftest import assert_matches

ORT_ONLY_DOMAINS = {"com.microsoft"}
# Contrib operators onnxruntime registers in the default domain.
ORT_DEFAULT_DOMAIN_OPS = {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}


def _schemas():
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    by_key = {}
    for s in C.get_all_operator_schema():
        by_key.setdefault((s.domain, s.name), []).append(s)
    return by_key


def _nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(a.g)
            for g in a.graphs:
                yield from _nodes(g)


def check_against_onnxruntime(path):
    """Checks every onnxruntime-specific node of the model at `path`;
    returns the op types checked ("domain::Op")."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    Opt = C.schemadef.OpSchema.FormalParameterOption
    schemas = _schemas()
    m = onnx.load(path, load_external_data=False)
    versions = {o.domain: o.version for o in m.opset_import}
    checked = []
    for n in _nodes(m.graph):
        if n.domain not in ORT_ONLY_DOMAINS and not (n.domain in ("", "ai.onnx") and
                                                     n.op_type in ORT_DEFAULT_DOMAIN_OPS):
            continue
        key = (n.domain, n.op_type)
        where = f"{n.name} ({n.domain}::{n.op_type})"
        assert key in schemas, f"{where}: onnxruntime has no such operator"
        version = versions.get(n.domain or "", versions.get("ai.onnx"))
        assert version is not None, f"{where}: domain {n.domain!r} not imported"
        fitting = [s for s in schemas[key] if s.since_version <= version]
        assert fitting, f"{where}: no schema at or below version {version}"
        s = max(fitting, key=lambda s: s.since_version)
        variadic = any(p.option == Opt.Variadic for p in s.inputs)
        if not variadic:
            assert len(n.input) <= len(s.inputs), (
                f"{where}: {len(n.input)} inputs, the schema has {len(s.inputs)}")
        for i, p in enumerate(s.inputs):
            if p.option == Opt.Single:
                assert i < len(n.input) and n.input[i], f"{where}: required input {p.name} missing"
        assert len(n.output) <= len(s.outputs), (
            f"{where}: {len(n.output)} outputs, the schema has {len(s.outputs)}")
        assert n.output and n.output[0], f"{where}: no first output"
        declared = set(s.attributes)
        for a in n.attribute:
            assert a.name in declared, f"{where}: attribute {a.name!r} not in {sorted(declared)}"
            assert a.type == int(s.attributes[a.name].type), f"{where}: attribute {a.name} type"
        for name, attr in s.attributes.items():
            if attr.required:
                assert any(a.name == name for a in n.attribute), f"{where}: {name} required"
        checked.append(f"{n.domain}::{n.op_type}")
    return checked


def _llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)).eval()
    path = tmp_path / "llama"
    model.save_pretrained(path)
    return str(path)


def _bert(tmp_path):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128,
                                 max_position_embeddings=64)).eval()
    path = tmp_path / "bert"
    model.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("model,task", [(_llama, "text-generation-with-past"),
                                        (_bert, "feature-extraction")],
                         ids=["llama", "bert"])
def test_pretrained_onnxruntime_target_follows_schemas(model, task, opset, tmp_path):
    hf.prepare()
    ckpt = model(tmp_path)
    path = str(tmp_path / "model.onnx")
    # export_pretrained verifies the file against PyTorch in onnxruntime.
    r = hf.export_pretrained(ckpt, task, path, opset=opset, target="onnxruntime")
    assert r.checks["max_abs_error"] < 1e-4
    checked = check_against_onnxruntime(path)
    assert checked, "no onnxruntime operator in the file: the onnxruntime target fused nothing"


class GeluMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from transformers.activations import NewGELUActivation

        self.norm = torch.nn.LayerNorm(32)
        self.up, self.act, self.down = (torch.nn.Linear(32, 64), NewGELUActivation(),
                                        torch.nn.Linear(64, 32))

    def forward(self, x, skip):
        return self.down(self.act(self.up(self.norm(x + skip))))


@pytest.mark.parametrize("opset", [18, 23])
def test_mlp_onnxruntime_target_follows_schemas(opset, tmp_path):
    torch.manual_seed(0)
    model = GeluMLP().eval()
    path = str(tmp_path / "mlp.onnx")
    x, skip = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    pt2onnx.export(model, (x, skip), path, opset=opset, target="onnxruntime",
                   dynamic_shapes=({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}))
    check_against_onnxruntime(path)
    x2, s2 = torch.randn(3, 7, 32), torch.randn(3, 7, 32)
    assert_matches(model, path, {"x": x2, "skip": s2}, atol=1e-5, rtol=1e-5)


def test_checker_rejects_a_wrong_node(tmp_path):
    """The check can fail: an attribute the schema lacks, a missing input."""
    from onnx import helper, TensorProto

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    bad_attr = helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.0)
    m = helper.make_model(helper.make_graph([bad_attr], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 18),
                                         helper.make_opsetid("com.microsoft", 1)])
    p = str(tmp_path / "bad.onnx")
    onnx.save(m, p)
    with pytest.raises(AssertionError, match="attribute 'alpha'"):
        check_against_onnxruntime(p)
    missing = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "x"], ["y"],
                               domain="com.microsoft")
    m = helper.make_model(helper.make_graph([missing], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 18),
                                         helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, p)
    with pytest.raises(AssertionError, match="required input gamma"):
        check_against_onnxruntime(p)
