// Safetensors checkpoints (what transformers' save_pretrained writes), read
// in place: each file is memory-mapped and only its JSON header is parsed;
// tensors become views into the mapping that also name the file and offset,
// so the writer copies their bytes file-to-file in the kernel
// (copy_file_range) and no weight passes through this process.
//
// Format: 8 bytes little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//  "__metadata__": {...}}, then the data; offsets count from the data's start.
// Every header is checked before anything is used: its length against the
// file and a 100 MB cap (the format's own), each dtype, shape and byte range
// (inside the file, matching the shape, not overlapping another tensor), and
// names unique across all files.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "archive/mapped_file.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

class SafetensorsFiles {
 public:
  // Maps and checks every file (the shards of one checkpoint, any order).
  // Throws pt2onnx::Error naming the file and the tensor at fault.
  explicit SafetensorsFiles(const std::vector<std::string>& paths);

  // Every tensor of every file, by name: views into the mappings, with the
  // file's descriptor and offset (alive as long as this object).
  const Weights& tensors() const { return tensors_; }
  // The file a tensor comes from (for messages).
  const std::string& file_of(const std::string& name) const;

 private:
  void read_header(const MappedFile& f);
  std::vector<std::unique_ptr<MappedFile>> files_;
  Weights tensors_;
  std::unordered_map<std::string, const MappedFile*> file_of_;
};

// The torch spelling ("bfloat16") of a safetensors dtype ("BF16"); empty if
// it has none we convert.
std::string_view safetensors_dtype_to_torch(std::string_view st);

}  // namespace pt2onnx
