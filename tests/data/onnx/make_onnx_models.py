"""Writes tests/data/onnx/made_by_onnx.onnx with the `onnx` Python package
(tests/cpp/test_model_reader.cpp reads it: a producer other than our writer).

It covers what our writer never emits: tensors in typed fields (float_data,
int64_data, int32_data holding float16 bits), a sequence-typed value_info,
model metadata_props, a function with a defaulted attribute
(attribute_proto), an If with subgraphs, node metadata_props and doc_string.

Run: python tests/data/onnx/make_onnx_models.py (onnx 1.23.2 made the
committed file; the test checks its content, not its bytes).
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6])  # float_data
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])  # int64_data
    half = helper.make_tensor("half", TensorProto.FLOAT16, [2], [1.5, -2.0])  # int32_data
    cmax = helper.make_tensor("cmax", TensorProto.FLOAT, [], [6.0])
    raw = helper.make_tensor("raw", TensorProto.FLOAT, [3],
                             np.array([0.5, 1.5, 2.5], np.float32).tobytes(), raw=True)

    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["then_out"])], "then_body", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, ["batch", 3])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"])], "else_body", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, ["batch", 3])])

    mm = helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm_node",
                          doc_string="matrix product")
    helper.set_metadata_props(mm, {"namespace": "encoder.proj"})
    nodes = [
        helper.make_node("Gemm", ["x", "w", "raw"], ["gemm"], alpha=0.25, transB=0,
                         name="gemm"),
        mm,
        helper.make_node("ReduceSum", ["mm"], ["cond_f"], keepdims=0),
        helper.make_node("Cast", ["cond_f"], ["cond"], to=TensorProto.BOOL),
        helper.make_node("If", ["cond"], ["if_out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("ScaleAdd", ["if_out", "gemm"], ["scaled"], domain="custom.fn"),
        helper.make_node("Reshape", ["scaled", "shape"], ["y"]),
        helper.make_node("Constant", [], ["c"],
                         value=helper.make_tensor("cv", TensorProto.INT32, [2], [7, -8])),
        helper.make_node("Clip", ["x", "", "cmax"], ["clip"], name="clip"),
        helper.make_node("SequenceConstruct", ["x", "x"], ["seq"]),
        helper.make_node("Dummy", [], ["d"], domain="custom.ops", names=["a", "b"],
                         ratios=[0.5, 2.0]),
    ]
    fn = helper.make_function(
        "custom.fn", "ScaleAdd", ["a", "b"], ["out"],
        [_ref_node(),
         helper.make_node("Mul", ["a", "s"], ["as"]),
         helper.make_node("Add", ["as", "b"], ["out"])],
        [helper.make_opsetid("", 18)], attributes=[],
        attribute_protos=[helper.make_attribute("scale", 2.0)], doc_string="a * scale + b")
    graph = helper.make_graph(
        nodes, "made_by_onnx",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, None]),
         helper.make_tensor_value_info("c", TensorProto.INT32, [2])],
        initializer=[w, shape, half, raw, cmax],
        value_info=[helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT,
                                                           ["batch", 3])])
    model = helper.make_model(
        graph, producer_name="onnx-helper", producer_version=onnx.__version__,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("custom.fn", 1),
                       helper.make_opsetid("custom.ops", 1)],
        functions=[fn], ir_version=10)
    helper.set_model_props(model, {"author": "tests", "purpose": "reader"})
    onnx.save(model, os.path.join(HERE, "made_by_onnx.onnx"))


def _ref_node():
    """Constant whose value_float is the caller's attribute `scale`."""
    node = helper.make_node("Constant", [], ["s"])
    a = onnx.AttributeProto()
    a.name = "value_float"
    a.ref_attr_name = "scale"
    a.type = onnx.AttributeProto.FLOAT
    node.attribute.append(a)
    return node


if __name__ == "__main__":
    main()
