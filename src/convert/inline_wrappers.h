// Inlining of wrapper higher-order ops: torch.export wraps regions that run
// under a grad mode (torch.no_grad(): wrap_with_set_grad_enabled) or an
// autocast mode (wrap_with_autocast) in a subgraph. For inference both are
// plain code: the subgraph's nodes are spliced into the parent graph, and
// autocast's dtype changes are made explicit as casts. with_effects(token,
// op, ...) (run_decompositions() puts linalg's error checks under it) becomes
// the op itself: effect tokens only order side effects.
#pragma once
#include "schema/program.h"

namespace pt2onnx {

// True for the higher-order ops that inline_wrappers() splices.
bool is_wrapper_target(const std::string& target);

// True when the program holds a wrapper anywhere (then a copy is inlined).
bool has_wrappers(const schema::Program& p);

// Splices every wrapper (nested ones included) into the top-level graph.
void inline_wrappers(schema::Program& p);

}  // namespace pt2onnx
