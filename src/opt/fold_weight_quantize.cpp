// QuantizeLinear of a constant (a PT2E program converted with
// fold_quantize=False, or torchao quantizing a weight in the graph) computed
// at export: the file then holds the weight's integers, not its floats, and
// onnxruntime's QDQ optimizer sees DequantizeLinear(constant) -> Conv /
// MatMul, the form it turns into QLinearConv / QLinearMatMul at load time.
//
// Folded: x a float32 initializer of any size (weights are never copied as
// floats: each value is read once and only the integers are kept), scale and
// zero point constants, per tensor, per axis or blocked, to int8 / uint8 /
// int16 / uint16, as the ONNX spec defines it: saturate(round_half_even(x /
// scale) + zero_point).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

// The values of a small scale / zero point of the types QuantizeLinear folds.
std::optional<std::vector<double>> values(const TensorData* d) {
  if (!d || d->numel() > (1 << 20) || !d->is_contiguous()) return std::nullopt;
  const DType t = d->dtype;
  if (t != DType::Float && t != DType::Int8 && t != DType::UInt8 && t != DType::Int16 &&
      t != DType::UInt16)
    return std::nullopt;
  return to_doubles(*d);
}

}  // namespace

size_t fold_weight_quantize(Graph& g) {
  std::unordered_set<std::string> outputs;
  for (auto& o : g.outputs) outputs.insert(o.name);
  std::unordered_map<std::string, const TensorData*> inits;
  for (auto& i : g.initializers) inits.emplace(i.name, &i.data);
  auto find = [&](const std::string& v) -> const TensorData* {
    auto it = inits.find(v);
    return it == inits.end() ? nullptr : it->second;
  };
  std::vector<Initializer> made;
  std::vector<size_t> folded;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.op_type != "QuantizeLinear" || !n.domain.empty() || n.inputs.size() != 3 ||
        outputs.count(n.outputs[0]))
      continue;
    const TensorData* x = find(n.inputs[0]);
    if (!x || x->dtype != DType::Float || x->lazy() || x->dims.empty()) continue;
    auto scale = values(find(n.inputs[1]));
    const TensorData* zd = find(n.inputs[2]);
    auto zp = values(zd);
    if (!scale || !zp || scale->size() != zp->size()) continue;
    const DType qt = zd->dtype;
    const int64_t lo = qt == DType::Int8 ? -128 : qt == DType::Int16 ? -32768 : 0;
    const int64_t hi = qt == DType::Int8    ? 127
                       : qt == DType::UInt8 ? 255
                       : qt == DType::Int16 ? 32767
                                            : 65535;
    const auto r = static_cast<int64_t>(x->dims.size());
    const Attr* ax = n.attr("axis");
    const Attr* bs = n.attr("block_size");
    int64_t axis = ax ? ax->i : 1;
    if (axis < 0) axis += r;
    const int64_t block = bs ? bs->i : 0;
    const bool per_tensor = scale->size() == 1 && block == 0;
    if (!per_tensor && (axis < 0 || axis >= r)) continue;
    // Element index -> its scale's index.
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < r; ++d) inner *= x->dims[static_cast<size_t>(d)];
    const int64_t dim = per_tensor ? 1 : x->dims[static_cast<size_t>(axis)];
    if (!per_tensor && block == 0 && static_cast<int64_t>(scale->size()) != dim) continue;
    const int64_t nblocks = block > 0 ? (dim + block - 1) / block : 0;
    if (block > 0 && static_cast<int64_t>(scale->size()) != x->numel() / dim * nblocks) continue;

    std::vector<uint8_t> contiguous;
    const uint8_t* xp = x->bytes();
    if (!x->is_contiguous()) {
      contiguous = x->contiguous_copy();
      xp = contiguous.data();
    }
    const int64_t count = x->numel();
    const size_t w = dtype_size(qt);
    std::vector<uint8_t> out(static_cast<size_t>(count) * w);
    for (int64_t i = 0; i < count; ++i) {
      size_t s = 0;
      if (!per_tensor) {
        const int64_t a = (i / inner) % dim;
        if (block == 0) {
          s = static_cast<size_t>(a);
        } else {
          const int64_t outer = i / (inner * dim);
          s = static_cast<size_t>((outer * nblocks + a / block) * inner + i % inner);
        }
      }
      float f;
      std::memcpy(&f, xp + 4 * i, 4);
      const double q =
          std::nearbyint(static_cast<double>(f / static_cast<float>((*scale)[s]))) + (*zp)[s];
      const auto v = static_cast<int64_t>(
          std::clamp<double>(q, static_cast<double>(lo), static_cast<double>(hi)));
      if (w == 1) {
        out[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
      } else {
        const auto h = static_cast<uint16_t>(v);
        std::memcpy(&out[static_cast<size_t>(i) * 2], &h, 2);
      }
    }
    made.push_back({n.outputs[0], TensorData::from_bytes(qt, x->dims, std::move(out))});
    folded.push_back(k);
  }
  if (folded.empty()) return 0;
  std::vector<Node> kept;
  size_t next = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (next < folded.size() && folded[next] == k) {
      ++next;
      continue;
    }
    kept.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(kept);
  for (auto& i : made) {
    g.types[i.name] = static_type(i.data.dtype, i.data.dims);
    g.initializers.push_back(std::move(i));
  }
  return folded.size();
}

}  // namespace pt2onnx
