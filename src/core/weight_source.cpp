// Weights of a program captured without them (a meta-device model), taken
// from a WeightSource: safetensors files and / or tensors in memory. Every
// mismatch is collected and reported at once, each naming the tensor and
// where it was looked for.
#include "core/weight_source.h"

#include <algorithm>
#include <set>

#include "ir/dtype.h"

namespace pt2onnx {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// At most `n` entries of a problem list, then how many more.
std::string listed(const std::vector<std::string>& items, size_t n = 12) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < n; ++i) s += "\n  " + items[i];
  if (items.size() > n) s += "\n  ... and " + std::to_string(items.size() - n) + " more";
  return s;
}

}  // namespace

Weights resolve_weights(const Weights& program, const WeightSource& source,
                        const SafetensorsFiles* files) {
  // Source tensors by name: files first, then memory (a name in both: error).
  std::unordered_map<std::string, std::pair<const WeightView*, std::string>> src;
  if (files)
    for (auto& [name, w] : files->tensors()) src.emplace(name, std::pair{&w, files->file_of(name)});
  std::vector<std::string> problems;
  for (auto& [name, w] : source.tensors) {
    auto [it, fresh] = src.emplace(name, std::pair{&w, std::string("the weights given in memory")});
    if (!fresh)
      problems.push_back("'" + name + "' is both in '" + it->second.second +
                         "' and in the weights given in memory");
  }

  Weights out = program;
  std::set<std::string> used;
  std::vector<std::string> missing, mismatched;
  // Sorted, so messages list tensors in a stable order.
  std::vector<std::string> fqns;
  fqns.reserve(program.size());
  for (auto& [fqn, w] : program) fqns.push_back(fqn);
  std::sort(fqns.begin(), fqns.end());
  for (auto& fqn : fqns) {
    const WeightView& want = program.at(fqn);
    const std::string* found = nullptr;
    auto try_name = [&](const std::string& n) {
      if (!found && src.count(n)) found = &src.find(n)->first;
    };
    try_name(fqn);
    if (auto a = source.aliases.find(fqn); a != source.aliases.end())
      for (auto& n : a->second) try_name(n);
    if (!found) {
      bool has_elements =
          std::all_of(want.sizes.begin(), want.sizes.end(), [](int64_t d) { return d > 0; });
      if (!want.data && has_elements)
        missing.push_back("'" + fqn + "' (" + want.dtype + ", shape " + shape_text(want.sizes) +
                          ")");
      continue;
    }
    const auto& [have, where] = src.at(*found);
    used.insert(*found);
    std::string named = "'" + fqn + "'" + (*found == fqn ? "" : " (as '" + *found + "')");
    const DType have_t = dtype_from_torch_name(have->dtype);
    const DType want_t = dtype_from_torch_name(want.dtype);
    auto convertible = [](DType t) {
      return t == DType::Float || t == DType::Float16 || t == DType::BFloat16;
    };
    const bool convert =
        have_t != want_t && source.convert_floats && convertible(have_t) && convertible(want_t);
    if (have_t != want_t && !convert) {
      mismatched.push_back(named + " in " + where + ": dtype " + have->dtype +
                           ", but the model's is " + want.dtype);
      continue;
    }
    if (have->sizes != want.sizes) {
      mismatched.push_back(named + " in " + where + ": shape " + shape_text(have->sizes) +
                           ", but the model's is " + shape_text(want.sizes));
      continue;
    }
    WeightView w = *have;
    if (convert) {
      // Read as the model's type: converted while written (TensorData::stored).
      w.stored_dtype = have->dtype;
      w.dtype = want.dtype;
      w.available_bytes = have->available_bytes / dtype_size(have_t) * dtype_size(want_t);
    }
    out[fqn] = std::move(w);
  }
  std::vector<std::string> unused;
  if (!source.allow_unused)
    for (auto& [name, s] : src)
      if (!used.count(name)) unused.push_back("'" + name + "' in " + s.second);
  std::sort(unused.begin(), unused.end());
  std::string msg;
  if (!missing.empty())
    msg += "\n" + std::to_string(missing.size()) +
           " weight(s) have no data (the model's tensor is on the meta device or fake) and are "
           "not in the weights given:" +
           listed(missing);
  if (!mismatched.empty())
    msg += "\n" + std::to_string(mismatched.size()) +
           " weight(s) differ from the model's parameter or buffer:" + listed(mismatched);
  if (!unused.empty())
    msg += "\n" + std::to_string(unused.size()) +
           " tensor(s) of the weights given are no weight of the model (a checkpoint of another "
           "model?):" +
           listed(unused);
  if (!problems.empty()) msg += "\n" + listed(problems);
  if (!msg.empty()) throw Error("the weights do not fit the model:" + msg);
  return out;
}

}  // namespace pt2onnx
