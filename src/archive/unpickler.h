// A restricted reader for the pickles torch.save writes for state dicts.
//
// It understands exactly the records torch.save emits for tensors:
// collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// torch._utils._rebuild_parameter, and storages given by persistent id
// ('storage', torch.<T>Storage, key, location, numel). Every other global is
// refused with a message naming it. Nothing is ever executed: "calling" an
// allowed global only builds a record.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace pt2onnx {

struct PickledTensor {
  std::string name;         // the state-dict key
  std::string storage_key;  // data/<key> in the torch.save zip
  DType dtype = DType::Undefined;
  uint64_t storage_numel = 0;
  int64_t storage_offset = 0;  // elements
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// Deepest nesting of pickled containers accepted. A state dict nests a few
// levels (dict -> tensor record -> size tuple); anything deeper is hostile.
inline constexpr size_t kMaxPickleDepth = 1000;

// Parses a torch.save data.pkl holding a dict name -> tensor. `what` names the
// file in error messages.
std::vector<PickledTensor> read_tensor_dict_pickle(const uint8_t* data, size_t size,
                                                   const std::string& what);

}  // namespace pt2onnx
