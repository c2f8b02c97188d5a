// Opens a .pt2 archive (torch.export.save) without Python and without running
// anything from it: the ExportedProgram JSON and a view of every weight and
// constant, read in place from the memory-mapped file.
//
// Layouts read (REFERENCE.md section 1):
//   current (torch >= ~2.9): <root>/models/model.json, data/weights/ +
//     model_weights_config.json (raw storages), data/constants/ (same)
//   older (~2.8): <root>/data/weights/model.pt and data/constants/model.pt,
//     torch.save pickles (read by the restricted unpickler)
//   oldest (<= 2.7): no root folder; serialized_exported_program.json,
//     serialized_state_dict.pt, serialized_constants.pt
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "archive/mapped_file.h"
#include "archive/zip_reader.h"
#include "ir/dtype.h"
#include "pt2onnx/pt2onnx.h"
#include "schema/program.h"

namespace pt2onnx {

class Pt2Archive {
 public:
  // From a file (memory-mapped) or from bytes the caller keeps alive.
  static std::unique_ptr<Pt2Archive> open(const std::string& path);
  static std::unique_ptr<Pt2Archive> from_memory(const uint8_t* data, size_t size,
                                                 const std::string& what);

  std::string_view program_json() const { return json_; }
  // Where the program JSON lies, for reading it in place (schema::JsonPlace).
  schema::JsonPlace program_json_place() const;
  // "<archive>: <entry>" of the program JSON, for error messages.
  const std::string& program_source() const { return json_source_; }
  const Weights& weights() const { return weights_; }
  const std::string& layout() const { return layout_; }
  const std::string& source() const { return what_; }

 private:
  Pt2Archive() = default;
  void load();
  void load_current(const std::string& root);
  void load_pickled(const ZipEntry& outer, const std::string& kind);
  void add_raw_payloads(const std::string& config_entry, const std::string& dir);
  // A weight viewing `storage` (storage_bytes long, inside the mapping) with
  // sizes / strides / storage_offset in elements; checks overflow and bounds.
  WeightView view(const std::string& where, DType dtype, std::vector<int64_t> sizes,
                  std::vector<int64_t> strides, int64_t storage_offset, const uint8_t* storage,
                  uint64_t storage_bytes, const std::string& storage_name) const;
  std::string_view entry_text(const ZipEntry& e) const;
  // For version errors: the archive's schema version and torch release (when
  // its program says) and what this pt2onnx reads.
  std::string versions_read(const std::string& root) const;
  const ZipEntry& require(const std::string& name) const;

  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string what_;
  std::unique_ptr<ZipReader> zip_;
  std::string_view json_;
  std::string json_source_;
  std::string layout_;
  Weights weights_;
  std::vector<std::unique_ptr<ZeroPages>> zeros_;  // fake tensors (empty storage files)
};

}  // namespace pt2onnx
