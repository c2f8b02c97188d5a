// Pieces of hand-written normalizations that the norm fusions share
// (fuse_rms_norm.cpp, fuse_layer_norm.cpp): a mean over the last axis, the
// inverse standard deviation 1 / sqrt(v + eps) in its usual spellings, a
// square, and the per-feature scale / shift that may follow. Each matcher
// checks that the values it walks through are read only inside the pattern
// (except the value it starts from and the one it returns).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "opt/pattern.h"

namespace pt2onnx {

// Static or symbolic last dim of `v`, when its rank is known and >= 1.
std::optional<Dim> last_dim(const GraphIndex& ix, const std::string& v);

// `v` = the mean of `input` over its last axis, keepdims: ReduceMean(input,
// axes = [last]) or Div(ReduceSum(input, axes = [last]), N) with N a
// one-element constant equal to the static last dim. Axes as an input
// (ReduceSum >= 13, ReduceMean >= 18) or an attribute.
struct LastAxisMean {
  std::string input;
  std::vector<size_t> nodes;  // indices of the nodes computing it
};
std::optional<LastAxisMean> match_last_axis_mean(const GraphIndex& ix, const std::string& v);

// `v` = Mul(x, x) or Pow(x, 2) with v read once (by the mean); returns x and
// how many times the node reads x.
struct Square {
  std::string x;
  size_t reads_of_x = 0;
  size_t node = 0;
};
std::optional<Square> match_square(const GraphIndex& ix, const std::string& v);

// Node `k` scales x by 1 / sqrt(var + eps):
//   Mul(x, Reciprocal(Sqrt(Add(var, eps)))), Mul(x, Div(1, Sqrt(...))),
//   Mul(x, Pow(Add(var, eps), -0.5)), Div(x, Sqrt(Add(var, eps)))
// (Mul and Add in either operand order; eps a one-element constant). Every
// candidate split of the Mul is returned; the caller keeps the one whose x
// matches the rest of its pattern.
struct InvStdScale {
  std::string x;
  std::string var;
  double eps = 0;
  std::vector<size_t> nodes;  // Add, Sqrt / Pow, Reciprocal / Div (not k)
};
std::vector<InvStdScale> match_inv_std_scale(const GraphIndex& ix, size_t k);

// What follows a normalized value y of last dim D: optional Mul by a weight of
// shape [D] (either order), then (with allow_bias) optional Add of a bias of
// shape [D], and (with allow_cast_to set) one Cast to that type anywhere in
// the chain. A step joins only when the value before it is read by that node
// alone. Weight and bias have y's dtype at that point.
struct AffineTail {
  std::string weight, bias;
  bool weight_after_cast = false;
  std::vector<size_t> nodes;      // in chain order
  std::optional<size_t> cast_at;  // position of the Cast in `nodes`
  std::string out;                // the chain's last value (y when empty)
};
AffineTail match_affine_tail(const GraphIndex& ix, const std::string& y, const Dim& d,
                             bool allow_bias, DType allow_cast_to);

// True when every value in `values` is read exactly `reads[i]` times and is
// no graph output beyond those reads (readers() counts graph outputs).
bool read_only_inside(const GraphIndex& ix, const std::vector<std::string>& values,
                      const std::vector<size_t>& reads);

// A rank-1 value of dim d (a per-feature weight).
bool is_feature_vector(const GraphIndex& ix, const std::string& v, const Dim& d);

// An initializer of ones shaped [d] in type t, added to g (name fresh from
// `base`); nullopt when d is not static or t has no C++ form.
std::optional<std::string> add_ones(Graph& g, FreshNames& names, const std::string& base, DType t,
                                    const Dim& d);

}  // namespace pt2onnx
