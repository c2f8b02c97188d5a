// What a model file is, read from its contents (not its name): the command
// converts .pt2 archives itself and hands TorchScript files (torch.jit.save)
// to Python, which alone can read their code.
#include <string>

#include "archive/mapped_file.h"
#include "archive/zip_reader.h"
#include "pt2onnx/error.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

FileKind file_kind(const std::string& path) {
  MappedFile file(path);  // throws, naming the path, when it cannot be read
  try {
    ZipReader zip(file.data(), file.size(), path, /*list_compressed=*/true);
    bool code = false, constants = false, data_pkl = false, pt2 = false;
    for (const auto& e : zip.entries()) {
      const std::string& n = e.name;
      size_t slash = n.find('/');
      std::string rest = slash == std::string::npos ? n : n.substr(slash + 1);
      if (rest.starts_with("code/")) code = true;
      if (rest == "constants.pkl") constants = true;
      if (rest == "data.pkl") data_pkl = true;
      if (rest.starts_with("models/") || rest == "archive_format" ||
          n == "serialized_exported_program.json")
        pt2 = true;
    }
    if (pt2) return FileKind::Pt2;
    // torch.jit.save: the module's code (code/__torch__/...) and its constants.
    if (code && constants) return FileKind::TorchScript;
    if (data_pkl) return FileKind::TorchSave;
    return FileKind::Pt2;  // the .pt2 reader says what is missing
  } catch (const Error&) {
    return FileKind::NotAnArchive;
  }
}

}  // namespace pt2onnx
