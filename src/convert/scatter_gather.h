// Helpers of the gather/scatter family shared with indexing.cpp.
#pragma once
#include <string>
#include <vector>

#include "convert/context.h"

namespace pt2onnx {

// The shape of `v` as 1-D int64 (a constant when static).
std::string shape_of(Ctx& c, const std::string& v);
// Dim `axis` of `v` as a 0-D int64 (a constant when static).
std::string dim_scalar(Ctx& c, const std::string& v, int64_t axis);
// Dims `axes` of `v` as 1-D int64 (a constant when they are static).
std::string dims_of(Ctx& c, const std::string& v, const std::vector<int64_t>& axes);
// int64 copy of `idx` with negative entries wrapped by `size` (0-D int64).
std::string wrap_index(Ctx& c, const std::string& idx, const std::string& size);
// `v` broadcast to `shape` (1-D int64) whose rank is `rank`.
std::string expand_to(Ctx& c, const std::string& v, const std::string& shape, size_t rank);
// A ScatterND node typed as its data input; reductions in a type
// onnxruntime implements.
std::string scatter_nd(Ctx& c, const std::string& data, const std::string& idx,
                       const std::string& upd, const std::string& reduction = "none");
// Where(cond, a, b) in a's dtype, also for types onnxruntime's Where lacks
// (bool, int8, int16).
std::string where_any(Ctx& c, const std::string& cond, const std::string& a, const std::string& b);
// self with src written into self[..., start:end:step, ...] along `axis`
// (start/end: python slice bounds; nullopt = open). Used by slice_scatter,
// select_scatter and the write-back of in-place mutations.
struct SliceBound {
  std::optional<int64_t> c;  // constant value
  std::string v;             // else a 1-D int64 value; both empty = None
  bool none() const { return !c && v.empty(); }
};
std::string slice_scatter_value(Ctx& c, const std::string& self, const std::string& src,
                                int64_t axis, SliceBound start, SliceBound end, int64_t step);

}  // namespace pt2onnx
