// The TorchScript file check (check_torchscript_file in pt2onnx.h). torch.jit.load compiles the
// archive's code/ text and runs each __setstate__ in it before anything else can
// look, so the text is read here, as torch's own lexer reads it (names, dots,
// strings, comments), and every reference to an op, an op namespace or a custom
// class is checked:
// - an op namespace outside kOpNamespaces, or an op in kRefusedOps (files,
//   prints, the process's random state, remote calls, ops that skip bounds checks);
// - a custom class (torch.classes.NS) outside kClassNamespaces: c10d's reach the
//   network;
// - `torch` or `ops` used other than as `torch.x` / `ops.ns.x` (passed, stored,
//   or looked up with getattr by a string), since then the op is not named;
// - a __setstate__ in a class that is not torch's own (__torch__.torch.*): it runs
//   on load. Torch's own are read by the same rules as every other method.
// The check over-refuses rather than under-refuses: a name is matched wherever
// it is used, including an attribute of a user's class with a refused name.
#include "archive/torchscript_check.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <vector>

#include "archive/mapped_file.h"
#include "archive/zip_reader.h"
#include "pt2onnx/error.h"
#include "pt2onnx/pt2onnx.h"

namespace pt2onnx {

namespace {

constexpr std::array<std::string_view, 6> kOpNamespaces = {"aten",       "prim",        "quantized",
                                                           "_quantized", "torchvision", "profiler"};
constexpr std::array<std::string_view, 3> kClassNamespaces = {"quantized", "rnn", "sparse"};
struct Refused {
  std::string_view ns, name, why;
};
constexpr std::array<Refused, 14> kRefusedOps = {{
    {"aten", "from_file", "maps a file into a tensor (and writes it when shared)"},
    {"aten", "save", "writes a file"},
    {"debugprims", "load_tensor", "reads a file"},
    {"prim", "Print", "prints"},
    {"aten", "_print", "prints"},
    {"aten", "manual_seed", "sets the process's random state"},
    {"aten", "seed", "sets the process's random state"},
    {"prim", "rpc_async", "calls another process"},
    {"prim", "rpc_sync", "calls another process"},
    {"prim", "rpc_remote", "calls another process"},
    {"aten", "_unsafe_index", "reads without bounds checks"},
    {"aten", "_unsafe_index_put", "writes without bounds checks"},
    {"aten", "_unsafe_masked_index", "reads without bounds checks"},
    {"aten", "_unsafe_masked_index_put_accumulate", "writes without bounds checks"},
}};
// aten::_sparse_{coo,compressed,csr,csc,bsr,bsc}_tensor_unsafe.
bool unchecked_sparse(std::string_view name) {
  return name.starts_with("_sparse_") && name.ends_with("_tensor_unsafe");
}
constexpr uint64_t kMaxCodeBytes = uint64_t{64} << 20;  // all code/ text, inflated

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

template <size_t N>
bool listed(const std::array<std::string_view, N>& list, std::string_view v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

// "a, b, c": the allowed names, for messages.
template <size_t N>
std::string joined(const std::array<std::string_view, N>& list) {
  std::string out;
  for (std::string_view v : list) out += (out.empty() ? "" : ", ") + std::string(v);
  return out;
}

std::optional<std::string> op_refusal(std::string_view ns, std::string_view name) {
  if (!listed(kOpNamespaces, ns))
    return "calls an op of namespace '" + std::string(ns) + "', which pt2onnx does not load " +
           "files with (only " + joined(kOpNamespaces) + ")";
  for (const Refused& r : kRefusedOps)
    if (r.ns == ns && r.name == name) return std::string(r.why);
  if (unchecked_sparse(name)) return std::string("builds a tensor without checking its indices");
  return std::nullopt;
}

// Why a custom class namespace (torch.classes.NS, in code or a pickle) is refused, or nothing.
std::optional<std::string> class_refusal(std::string_view ns) {
  if (listed(kClassNamespaces, ns)) return std::nullopt;
  return "is a custom class namespace pt2onnx does not load files with (only " +
         joined(kClassNamespaces) + ")";
}

// ---- reading the code entries ----------------------------------------------------------

std::string inflate_entry(const ZipReader& zip, const ZipEntry& e, uint64_t budget) {
  if (e.method != 8)
    throw Error(zip.what() + ": entry '" + e.name + "' is compressed with method " +
                std::to_string(e.method) + ", which torch.jit.save does not write");
  if (e.inflated_size > budget)
    throw Error(zip.what() + ": entry '" + e.name + "' inflates to " +
                std::to_string(e.inflated_size) + " bytes, more code than pt2onnx reads (" +
                std::to_string(kMaxCodeBytes >> 20) + " MiB in all)");
  std::string out(static_cast<size_t>(e.inflated_size), '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw Error("zlib: inflateInit2 failed");
  z.next_in = const_cast<Bytef*>(zip.data(e));
  z.avail_in = static_cast<uInt>(std::min<uint64_t>(e.size, UINT32_MAX));
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&z, Z_FINISH);
  bool whole = rc == Z_STREAM_END && z.total_out == e.inflated_size && e.size <= UINT32_MAX;
  inflateEnd(&z);
  if (!whole)
    throw Error(zip.what() + ": entry '" + e.name +
                "' does not inflate to the size its header states (damaged archive)");
  return out;
}

bool is_code(const std::string& lowered_name) {
  return lowered_name.ends_with(".py") || lowered_name.starts_with("code/") ||
         lowered_name.find("/code/") != std::string::npos;
}

std::string_view as_view(const uint8_t* p, uint64_t n) {
  return {reinterpret_cast<const char*>(p), static_cast<size_t>(n)};
}

// ---- tokens ------------------------------------------------------------------------------

struct Token {
  enum Kind { Word, String, Punct } kind;
  std::string_view text;  // a String's text includes its quotes
  int line;
  bool first;  // the first token of its line
  bool col0;   // and at column 0
};

struct Lexer {
  std::string_view src;
  std::string what;  // "entry 'x/code/__torch__.py'"
  size_t i = 0;
  int line = 1;
  bool at_line_start = true, at_col0 = true;

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(what + ":" + std::to_string(line) + ": " + why);
  }
  static bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

  // Skips blanks, comments and escaped line ends; false at the end of the text.
  bool skip_space() {
    while (i < src.size()) {
      char c = src[i];
      if (c == '\n') {
        ++line, ++i, at_line_start = at_col0 = true;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f') {
        ++i, at_col0 = false;
      } else if (c == '\\' && i + 1 < src.size() && (src[i + 1] == '\n' || src[i + 1] == '\r')) {
        ++i, at_col0 = false;
      } else if (c == '#') {
        while (i < src.size() && src[i] != '\n') ++i;
      } else {
        return true;
      }
    }
    return false;
  }

  size_t string_end(size_t start) {
    char q = src[start];
    bool triple = src.substr(start, 3) == std::string(3, q);
    size_t j = start + (triple ? 3 : 1);
    for (; j < src.size(); ++j) {
      if (src[j] == '\\') {
        if (++j < src.size() && src[j] == '\n') ++line;
        continue;
      }
      if (src[j] == '\n') ++line;
      if (src[j] == q && (!triple || src.substr(j, 3) == std::string(3, q)))
        return j + (triple ? 3 : 1);
    }
    fail("unterminated string");
  }

  std::vector<Token> run() {
    std::vector<Token> out;
    while (skip_space()) {
      size_t start = i;
      Token t{Token::Punct, {}, line, at_line_start, at_line_start && at_col0};
      char c = src[i];
      if (c == '"' || c == '\'') {
        t.kind = Token::String;
        i = string_end(i);
      } else if (word_char(c)) {
        t.kind = std::isdigit(static_cast<unsigned char>(c)) ? Token::Punct : Token::Word;
        while (i < src.size() && word_char(src[i])) ++i;
      } else {
        ++i;
      }
      t.text = src.substr(start, i - start);
      at_line_start = at_col0 = false;
      out.push_back(t);
    }
    return out;
  }
};

// ---- the rules -------------------------------------------------------------------------

struct Scope {
  std::string cls;     // the class being read (qualified), or empty
  std::string method;  // the def being read, or empty
};

class CodeCheck {
 public:
  CodeCheck(std::string entry, std::string module, std::vector<Token> tokens)
      : entry_(std::move(entry)), module_(std::move(module)), t_(std::move(tokens)) {}

  void run() {
    for (size_t k = 0; k < t_.size(); ++k) {
      track_scope(k);
      if (t_[k].kind != Token::Word || punct(k - 1, '.')) continue;
      std::string_view w = t_[k].text;
      if (w == "torch" || w == "ops" || w == "__torch__") check_chain(k);
      if (w == "print") refuse(k, "print", "prints");
    }
  }

 private:
  std::string entry_, module_;
  std::vector<Token> t_;
  Scope scope_;

  bool punct(size_t k, char c) const {
    return k < t_.size() && t_[k].kind == Token::Punct && t_[k].text.size() == 1 &&
           t_[k].text[0] == c;
  }
  // `w0 . w1 . w2 ...` from k: the words.
  std::vector<std::string_view> chain(size_t k) const {
    std::vector<std::string_view> out{t_[k].text};
    while (punct(k + 1, '.') && k + 2 < t_.size() && t_[k + 2].kind == Token::Word) {
      out.push_back(t_[k + 2].text);
      k += 2;
    }
    return out;
  }

  void track_scope(size_t k) {
    const Token& t = t_[k];
    if (t.kind != Token::Word || k + 1 >= t_.size() || t_[k + 1].kind != Token::Word) return;
    // A class starts at any `class` that begins a line (torch's parser wants it at column 0;
    // this check does not rely on that), a function at a `def` at column 0.
    if (t.text == "class" && t.first) {
      scope_ = {module_ + "." + std::string(t_[k + 1].text), ""};
    } else if (t.text == "def") {
      if (t.col0) scope_.cls.clear();
      scope_.method = std::string(t_[k + 1].text);
      // Outside any class it is not a method torch would call, but read as one all the same.
      if (scope_.method == "__setstate__" && !scope_.cls.starts_with("__torch__.torch."))
        fail(t,
             "a __setstate__ not of torch's own modules, which torch.jit.load would run; "
             "pt2onnx loads no such file");
    }
  }

  void check_chain(size_t k) {
    std::vector<std::string_view> c = chain(k);
    if (c[0] == "__torch__") {
      for (size_t j = 1; j + 2 < c.size(); ++j)
        if (c[j] == "torch" && c[j + 1] == "classes") check_class(k, c[j + 2]);
      return;
    }
    if (c.size() == 1)
      return refuse(k, std::string(c[0]),
                    "is used as a value (passed, stored or searched with getattr), so the op it "
                    "reaches is not named");
    if (c[0] == "torch" && c[1] == "classes") {
      if (c.size() > 2) check_class(k, c[2]);
      return;
    }
    size_t at = c[0] == "torch" && c[1] == "ops" ? 2 : c[0] == "ops" ? 1 : 0;
    if (at == 0) return check_op(k, "aten", c[1]);  // torch.NAME is aten::NAME
    if (c.size() <= at + 1)
      return refuse(k, std::string(c[0]) + "...",
                    "names an op namespace without an op, so the op it reaches is not named");
    check_op(k, c[at], c[at + 1]);
  }

  void check_op(size_t k, std::string_view ns, std::string_view name) {
    if (auto why = op_refusal(ns, name))
      refuse(k, std::string(ns) + "::" + std::string(name), *why);
  }
  void check_class(size_t k, std::string_view ns) {
    if (auto why = class_refusal(ns)) refuse(k, "torch.classes." + std::string(ns), *why);
  }

  [[noreturn]] void refuse(size_t k, const std::string& op, const std::string& why) const {
    fail(t_[k], "uses " + op + ", which " + why + "; pt2onnx loads no such file");
  }
  [[noreturn]] void fail(const Token& t, const std::string& why) const {
    std::string where = scope_.cls.empty() ? module_ : scope_.cls;
    if (!scope_.method.empty()) where += "." + scope_.method;
    throw Error(entry_ + ", line " + std::to_string(t.line) + ", " + where + ": " + why);
  }
};

// code/__torch__/a/b.py -> __torch__.a.b (the qualified names its classes get).
std::string module_of(const std::string& name) {
  size_t at = lower(name).find("code/");
  std::string rest = name.substr(at == std::string::npos ? 0 : at + 5);
  if (lower(rest).ends_with(".py")) rest.resize(rest.size() - 3);
  std::replace(rest.begin(), rest.end(), '/', '.');
  return rest;
}

// Custom classes named in a pickle (data.pkl, constants.pkl): the module string
// `__torch__.torch.classes.NS` appears whole in the pickle's bytes.
void check_pickle_classes(const ZipReader& zip, const std::string& entry, std::string_view bytes) {
  constexpr std::string_view kTag = "torch.classes.";
  for (size_t at = bytes.find(kTag); at != std::string_view::npos; at = bytes.find(kTag, at + 1)) {
    size_t s = at + kTag.size(), end = s;
    while (end < bytes.size() && Lexer::word_char(bytes[end])) ++end;
    std::string_view ns = bytes.substr(s, end - s);
    if (auto why = class_refusal(ns))
      throw Error(zip.what() + ": entry '" + entry + "' builds an object of torch.classes." +
                  std::string(ns) + ", which " + *why);
  }
}

}  // namespace

std::optional<std::string> torchscript_op_refusal(std::string_view kind) {
  size_t sep = kind.find("::");
  if (sep == std::string_view::npos) return std::nullopt;
  return op_refusal(kind.substr(0, sep), kind.substr(sep + 2));
}

void check_torchscript_file(const std::string& path) {
  MappedFile file(path);
  check_torchscript_bytes(file.data(), file.size(), path);
}

void check_torchscript_bytes(const uint8_t* data, size_t size, const std::string& path) {
  ZipReader zip(data, size, path, /*list_compressed=*/true);
  // torch finds entries without regard to case: two names that differ only in
  // case could show this check one text and torch another.
  std::map<std::string, std::string> seen;
  uint64_t budget = kMaxCodeBytes;
  for (const ZipEntry& e : zip.entries()) {
    std::string low = lower(e.name);
    if (auto [it, fresh] = seen.emplace(low, e.name); !fresh)
      throw Error(path + ": entries '" + it->second + "' and '" + e.name +
                  "' differ only in case; torch would read either");
    if (!is_code(low)) {
      if (!low.ends_with(".pkl")) continue;  // tensor data, version, byteorder
      if (e.compressed)
        throw Error(path + ": entry '" + e.name + "' is a compressed pickle, which " +
                    "torch.jit.save does not write");
      check_pickle_classes(zip, e.name, as_view(zip.data(e), e.size));
      continue;
    }
    std::string text =
        e.compressed ? inflate_entry(zip, e, budget) : std::string(as_view(zip.data(e), e.size));
    if (text.size() > budget)
      throw Error(path + ": more code than pt2onnx reads (" + std::to_string(kMaxCodeBytes >> 20) +
                  " MiB in all)");
    budget -= text.size();
    // Source ranges for messages, unpickled by torch but never compiled.
    if (low.ends_with(".debug_pkl")) {
      check_pickle_classes(zip, e.name, text);
      continue;
    }
    std::string what = path + ": entry '" + e.name + "'";
    Lexer lexer{text, what};
    CodeCheck(what, module_of(e.name), lexer.run()).run();
  }
}

}  // namespace pt2onnx
