// The rules every ONNX consumer relies on, checked on the finished graph
// before it is written (the pipeline's last step, every export, every target):
//   - node names unique within each graph and function body (empty names
//     aside: ONNX allows them);
//   - every value defined once: graph inputs, initializers and node outputs
//     of a graph, and no nested graph redefining a value of an enclosing one
//     (ONNX's single static assignment, across scopes);
//   - every input of a node defined before it: a graph input, an
//     initializer, an earlier node's output, or, in a nested graph, a value
//     of an enclosing scope defined before the node that holds it;
//   - every graph output defined (a nested graph's may be an outer value);
//   - an opset import for every domain a node uses (the default domain is
//     always imported), in the model and in each function body, and a
//     function's import of a domain at the model's version;
//   - function bodies: inputs read only from the formal inputs and earlier
//     nodes, outputs defined, attribute references to declared attributes.
// A violation is a bug of ours, not of the input: check_structure throws an
// Error saying so, naming the rule, the graph and the node, and `after` (the
// pass or stage that ran last). Linear in the number of nodes, values and
// attributes.
#pragma once
#include <string>

#include "ir/graph.h"

namespace pt2onnx {

// `opset`: the default domain's version the model imports.
void check_structure(const Graph& g, int opset, const std::string& after);

// The value rules only (single assignment, defined before use, outputs
// defined), which every pass keeps: node names are settled and domains
// imported at the end of the pipeline. Run after every pass when the
// environment sets PT2ONNX_CHECK_EACH_PASS=1 (pass_list.cpp), to name the pass
// that broke a graph.
void check_values(const Graph& g, const std::string& after);
bool check_each_pass();
// PT2ONNX_PASS_TIMES=1: each pass's wall time and count on stderr
// (pass_list.cpp; where the optimize stage's time goes, bench/node_scaling.md).
bool print_pass_times();

}  // namespace pt2onnx
