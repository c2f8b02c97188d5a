// Drives conversion of a whole program: inputs and weights, every node
// through its registered converter, then the outputs.
#pragma once
#include "ir/graph.h"
#include "pt2onnx/pt2onnx.h"
#include "schema/program.h"

namespace pt2onnx {

Graph convert_graph(const schema::Program& prog, const Weights& weights, const Options& opt);

class Ctx;
// Converts the nodes of a higher-order op's graph argument (cond branch, loop
// body) into the builder's current scope, its placeholders bound to the ONNX
// values `inputs` (in order); returns the ONNX values of its outputs. The
// caller opens and closes the scope (GraphBuilder::begin_subgraph) or, to
// inline the graph, does not.
std::vector<std::string> convert_nested(Ctx& outer, const schema::Graph& g,
                                        const std::vector<std::string>& inputs);

// Targets that convert to nothing (runtime asserts, metadata checks).
bool is_ignored_target(const std::string& target);

// Every target of `prog` (nested graphs included) that does not convert at `opset`.
class CustomConverters;
// `custom`: user converters whose targets count as supported (may be null).
std::vector<UnsupportedOp> find_unsupported(const schema::Program& prog, int opset,
                                            const CustomConverters* custom = nullptr);

// True when `target` converts at `opset` (to nodes, or to nothing if ignored).
bool converts(const std::string& target, int opset);

}  // namespace pt2onnx
