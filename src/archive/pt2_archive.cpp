#include "archive/pt2_archive.h"

#include "archive/unpickler.h"
#include "ir/graph.h"
#include "schema/program.h"
#include "schema/versions.h"

namespace pt2onnx {

namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::unique_ptr<Pt2Archive> Pt2Archive::open(const std::string& path) {
  std::unique_ptr<Pt2Archive> a(new Pt2Archive());
  a->file_ = std::make_unique<MappedFile>(path);
  a->data_ = a->file_->data();
  a->size_ = a->file_->size();
  a->what_ = path;
  a->load();
  return a;
}

std::unique_ptr<Pt2Archive> Pt2Archive::from_memory(const uint8_t* data, size_t size,
                                                    const std::string& what) {
  std::unique_ptr<Pt2Archive> a(new Pt2Archive());
  a->data_ = data;
  a->size_ = size;
  a->what_ = what;
  a->load();
  return a;
}

const ZipEntry& Pt2Archive::require(const std::string& name) const {
  const ZipEntry* e = zip_->find(name);
  if (!e) throw Error(what_ + ": missing entry '" + name + "'");
  return *e;
}

std::string_view Pt2Archive::entry_text(const ZipEntry& e) const {
  return std::string_view(reinterpret_cast<const char*>(zip_->data(e)), e.size);
}

schema::JsonPlace Pt2Archive::program_json_place() const {
  schema::JsonPlace place;
  if (!file_ || json_.empty()) return place;  // bytes the caller owns: nothing is known past them
  place.in_file = true;
  const auto end = reinterpret_cast<uintptr_t>(json_.data() + json_.size());
  place.readable_after = reinterpret_cast<uintptr_t>(data_ + size_) - end;
  return place;
}

void Pt2Archive::load() {
  zip_ = std::make_unique<ZipReader>(data_, size_, what_);
  if (zip_->entries().empty()) throw Error(what_ + ": the archive is empty");
  // Oldest layout: files at the top level.
  if (const ZipEntry* ep = zip_->find("serialized_exported_program.json")) {
    layout_ = "legacy (torch <= 2.7): serialized_exported_program.json";
    json_ = entry_text(*ep);
    json_source_ = what_ + ": " + ep->name;
    load_pickled(require("serialized_state_dict.pt"), "serialized_state_dict.pt");
    if (const ZipEntry* c = zip_->find("serialized_constants.pt"))
      load_pickled(*c, "serialized_constants.pt");
    return;
  }
  const std::string& first = zip_->entries().front().name;
  size_t slash = first.find('/');
  if (slash == std::string::npos)
    throw Error(what_ +
                ": not a torch.export archive (no root folder and no "
                "serialized_exported_program.json)");
  load_current(first.substr(0, slash + 1));
}

std::string Pt2Archive::versions_read(const std::string& root) const {
  std::string s;
  if (const ZipEntry* m = zip_->find(root + "models/model.json"))
    if (auto v = schema::peek_version(entry_text(*m)))
      s = "the archive holds " + schema::describe(*v) + "; ";
  return s + schema::supported_range();
}

void Pt2Archive::load_current(const std::string& root) {
  // The layout's own versions (schema/versions.h): torch.export.load refuses
  // any other too. An archive without them (older writers) is read by layout.
  if (const ZipEntry* f = zip_->find(root + "archive_format")) {
    std::string fmt = trim(entry_text(*f));
    if (fmt != "pt2")
      throw Error(what_ + ": archive_format is '" + fmt + "', expected 'pt2' (" +
                  versions_read(root) + ")");
  }
  if (const ZipEntry* f = zip_->find(root + "archive_version")) {
    std::string version = trim(entry_text(*f));
    if (version != schema::kArchiveVersion)
      throw Error(what_ + ": archive_version is '" + version +
                  "': this pt2onnx reads archive version " + std::string(schema::kArchiveVersion) +
                  " (" + versions_read(root) + ")");
  }
  if (const ZipEntry* bo = zip_->find(root + "byteorder")) {
    std::string order = trim(entry_text(*bo));
    if (order != "little")
      throw Error(what_ + ": " + root + "byteorder is '" + order +
                  "': big-endian archives are not supported (re-save the model on a "
                  "little-endian machine)");
  }
  const ZipEntry* model = zip_->find(root + "models/model.json");
  if (!model) {
    // One model under another name is fine; several need a choice we do not offer.
    const ZipEntry* only = nullptr;
    for (auto& e : zip_->entries())
      if (e.name.starts_with(root + "models/") && e.name.ends_with(".json")) {
        if (only) throw Error(what_ + ": several models in the archive; pt2onnx reads one");
        only = &e;
      }
    if (!only) throw Error(what_ + ": missing entry '" + root + "models/model.json'");
    model = only;
  }
  json_ = entry_text(*model);
  json_source_ = what_ + ": " + model->name;
  std::string stem = model->name.substr((root + "models/").size());
  stem = stem.substr(0, stem.size() - 5);  // drop ".json"

  const ZipEntry* legacy_w = zip_->find(root + "data/weights/" + stem + ".pt");
  if (legacy_w) {
    layout_ = "older (torch ~2.8): pickled data/weights/" + stem + ".pt";
    load_pickled(*legacy_w, "data/weights/" + stem + ".pt");
    if (const ZipEntry* c = zip_->find(root + "data/constants/" + stem + ".pt"))
      load_pickled(*c, "data/constants/" + stem + ".pt");
    return;
  }
  layout_ = "pt2 (torch.export.save)";
  add_raw_payloads(root + "data/weights/" + stem + "_weights_config.json", root + "data/weights/");
  if (zip_->find(root + "data/constants/" + stem + "_constants_config.json"))
    add_raw_payloads(root + "data/constants/" + stem + "_constants_config.json",
                     root + "data/constants/");
}

void Pt2Archive::add_raw_payloads(const std::string& config_entry, const std::string& dir) {
  const ZipEntry& cfg = require(config_entry);
  auto config = schema::parse_payload_config(entry_text(cfg), what_ + ": " + config_entry);
  for (auto& [fqn, e] : config) {
    std::string where = what_ + ": " + config_entry + ": '" + fqn + "'";
    if (e.use_pickle)
      throw Error(where +
                  " is a pickled tensor subclass / script object, which pt2onnx does "
                  "not load (nothing from an archive is executed)");
    if (!e.tensor_meta) throw Error(where + " has no tensor_meta");
    const schema::TensorMeta& m = *e.tensor_meta;
    const ZipEntry& data = require(dir + e.path_name);
    auto as_int = [&](const schema::SymSize& s, const char* field) {
      if (!s.value) throw Error(where + ": symbolic " + field + " in a weight's metadata");
      return *s.value;
    };
    std::vector<int64_t> sizes, strides;
    for (auto& s : m.sizes) sizes.push_back(as_int(s, "size"));
    for (auto& s : m.strides) strides.push_back(as_int(s, "stride"));
    int64_t offset = as_int(m.storage_offset, "storage_offset");
    const uint8_t* storage = zip_->data(data);
    uint64_t storage_bytes = data.size;
    if (data.size == 0) {
      // An empty storage file stands for a fake tensor: zeros, as many as the view reaches.
      auto span = strided_span_bytes(sizes, strides, dtype_size(m.dtype));
      uint64_t end = 0;
      if (span && offset >= 0 &&
          !__builtin_mul_overflow(static_cast<uint64_t>(offset), dtype_size(m.dtype), &end) &&
          !__builtin_add_overflow(end, *span, &end) && end > 0) {
        zeros_.push_back(std::make_unique<ZeroPages>(end, where));
        storage = zeros_.back()->data();
        storage_bytes = end;
      }
    }
    WeightView w = view(where, m.dtype, std::move(sizes), std::move(strides), offset, storage,
                        storage_bytes, data.name);
    weights_[fqn] = std::move(w);
  }
}

WeightView Pt2Archive::view(const std::string& where, DType dtype, std::vector<int64_t> sizes,
                            std::vector<int64_t> strides, int64_t storage_offset,
                            const uint8_t* storage, uint64_t storage_bytes,
                            const std::string& storage_name) const {
  size_t es = dtype_size(dtype);
  auto span = strided_span_bytes(sizes, strides, es);
  uint64_t off_bytes;
  if (!span || storage_offset < 0 ||
      __builtin_mul_overflow(static_cast<uint64_t>(storage_offset), es, &off_bytes))
    throw Error(where + ": sizes / strides / storage_offset are negative or overflow");
  if (off_bytes > storage_bytes || *span > storage_bytes - off_bytes)
    throw Error(where + ": needs " + std::to_string(*span) + " bytes at offset " +
                std::to_string(off_bytes) + " but entry '" + storage_name + "' has " +
                std::to_string(storage_bytes));
  WeightView w;
  w.dtype = std::string(dtype_name(dtype));
  w.sizes = std::move(sizes);
  w.strides = std::move(strides);
  w.data = storage + off_bytes;
  w.available_bytes = storage_bytes - off_bytes;
  // Bytes inside the mapped file can be copied by the kernel (not the zeros of fake tensors).
  if (file_ && storage >= data_ && storage < data_ + size_) {
    w.source_fd = file_->fd();
    w.source_offset = static_cast<uint64_t>(storage - data_) + off_bytes;
  }
  return w;
}

void Pt2Archive::load_pickled(const ZipEntry& outer, const std::string& kind) {
  if (outer.size == 0) return;  // an empty artifact: no tensors
  // The payload is itself a torch.save zip, stored inside this one.
  std::string inner_what = what_ + ": " + kind;
  ZipReader inner(zip_->data(outer), outer.size, inner_what);
  if (inner.entries().empty()) throw Error(inner_what + ": empty torch.save archive");
  const std::string& first = inner.entries().front().name;
  size_t slash = first.find('/');
  std::string root = slash == std::string::npos ? "" : first.substr(0, slash + 1);
  if (const ZipEntry* bo = inner.find(root + "byteorder")) {
    std::string order =
        trim(std::string_view(reinterpret_cast<const char*>(inner.data(*bo)), bo->size));
    if (order != "little") throw Error(inner_what + ": big-endian tensors are not supported");
  }
  const ZipEntry* pkl = inner.find(root + "data.pkl");
  if (!pkl) throw Error(inner_what + ": missing entry '" + root + "data.pkl'");
  auto tensors = read_tensor_dict_pickle(inner.data(*pkl), pkl->size, inner_what + "/data.pkl");
  for (auto& t : tensors) {
    std::string where = inner_what + ": '" + t.name + "'";
    const ZipEntry* st = inner.find(root + "data/" + t.storage_key);
    if (!st) throw Error(where + ": missing storage entry 'data/" + t.storage_key + "'");
    uint64_t storage_bytes;
    if (__builtin_mul_overflow(t.storage_numel, dtype_size(t.dtype), &storage_bytes) ||
        storage_bytes > st->size)
      throw Error(where + ": its storage claims " + std::to_string(t.storage_numel) +
                  " elements but entry '" + st->name + "' has " + std::to_string(st->size) +
                  " bytes");
    WeightView w = view(where, t.dtype, t.sizes, t.strides, t.storage_offset, inner.data(*st),
                        storage_bytes, st->name);
    weights_[t.name] = std::move(w);
  }
}

}  // namespace pt2onnx
