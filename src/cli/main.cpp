// The pt2onnx command: converts .pt2 archives (torch.export.save) to ONNX
// with no Python and no libtorch, and inspects them. A TorchScript file
// (torch.jit.save) is handed to pt2onnx's Python (only PyTorch runs its code).
//
// Exit codes: 0 success, 1 conversion error, 2 usage error.
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pt2onnx/pretty.h"
#include "pt2onnx/pt2onnx.h"

#ifdef PT2ONNX_MIMALLOC
#include <mimalloc.h>
#endif

namespace {

constexpr int kOk = 0, kConversionError = 1, kUsageError = 2;

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: pt2onnx MODEL.pt2 [-o MODEL.onnx] [options]\n"
      "       pt2onnx MODEL.pt --input NAME:DTYPE[DIMS] [...] [-o MODEL.onnx] [options]\n"
      "       pt2onnx inspect MODEL.pt2 [--opset N]\n"
      "       pt2onnx show MODEL.onnx      print an ONNX model as text (external data\n"
      "                                    files are not read)\n"
      "       pt2onnx --version | --help\n"
      "\n"
      "Converts a torch.export archive to ONNX without Python or libtorch; nothing in\n"
      "the archive is executed. A TorchScript file (torch.jit.save; told apart by its\n"
      "contents, not its name) is converted by pt2onnx's Python, which needs torch.\n"
      "Loading a TorchScript file runs its code, so its code is read first, without\n"
      "running it, and the file refused unless all of it is tensor code (no\n"
      "__setstate__ but torch's own, no file, print or process op).\n"
      "\n"
      "options:\n"
      "  -o, --output PATH          output file (default: MODEL.onnx beside the input)\n"
      "  --opset N                  ONNX opset, %d..%d (default %d)\n"
      "  --external-data MODE       always (default, as torch.onnx), never (one file),\n"
      "                             auto (above ~1.8 GB); weights go to PATH.data;\n"
      "                             shards:2GB splits them into files of at most 2 GB\n"
      "                             (PATH.data, PATH.1.data, ...)\n"
      "  --no-optimize              write the graph as converted (no passes)\n"
      "  --target NAME              standard (default): ONNX operators, fused where the\n"
      "                             opset has fused ones; onnxruntime: onnxruntime's\n"
      "                             contrib operators where they run faster\n"
      "  --dtype TYPE               float32 (default), float16 or bfloat16: weights,\n"
      "                             inputs, outputs and compute in that type; norm\n"
      "                             statistics, softmax and sums stay float32\n"
      "  --quantize SPEC            int4 or int8: Linear / MatMul weights quantized in\n"
      "                             blocks while written (MatMulNBits with --target\n"
      "                             onnxruntime; DequantizeLinear + MatMul otherwise);\n"
      "                             settings after commas: block_size=N (int4: 32;\n"
      "                             int8: per channel), asymmetric, accuracy_level=N,\n"
      "                             embeddings (tables too: GatherBlockQuantized /\n"
      "                             Gather + DequantizeLinear)\n"
      "  --fallback custom_domain   write ops with no converter as pkg.torch.ops nodes\n"
      "                             (listed on stderr) instead of failing\n"
      "  --functions FILE.onnx      custom converters: an ONNX file of functions, each\n"
      "                             converting the op <domain>::<name> (repeatable;\n"
      "                             pt2onnx.save_custom_converters writes one)\n"
      "  --input-names A [B ...]    rename graph inputs in order (commas work too)\n"
      "  --output-names Y [Z ...]   rename graph outputs in order\n"
      "  --dim-name INPUT:AXIS=NAME name a dynamic dim (dim_param), e.g. x:0=batch;\n"
      "                             repeatable. torch.export.save does not keep Dim names.\n"
      "  --training MODE            preserve (default), eval, training. A .pt2 is\n"
      "                             captured in one mode and converts as captured;\n"
      "                             training also writes the buffers it updates\n"
      "                             (batch norm statistics) as <buffer>_updated outputs\n"
      "  --modules-as-functions all|CLASS[,CLASS...]\n"
      "                             write calls of every submodule (of these classes:\n"
      "                             pkg.mod.Block or Block) as ONNX local functions\n"
      "  --inline                   write every function call as its body again\n"
      "  --input NAME:DTYPE[DIMS]   a TorchScript file's input, e.g. "
      "'x:float32[batch,3,224,224]':\n"
      "                             ints are static dims, names dynamic ones (example size 2,\n"
      "                             or NAME=N); one per input, in order (TorchScript only)\n"
      "  -q, --quiet                print nothing but errors\n"
      "  -v, --verbose              print stage timings\n"
      "\n"
      "exit codes: 0 ok, 1 conversion error, 2 usage error\n",
      pt2onnx::kMinOpset, pt2onnx::kMaxOpset, 18);
}

struct UsageError {
  std::string what;
};

int parse_int(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    int v = std::stoi(s, &used);
    if (used != s.size()) throw UsageError{};
    return v;
  } catch (...) {
    throw UsageError{std::string(what) + " must be an integer, got '" + s + "'"};
  }
}

void split_into(const std::string& s, std::vector<std::string>& out) {
  size_t start = 0;
  while (start <= s.size()) {
    size_t c = s.find(',', start);
    if (c == std::string::npos) c = s.size();
    if (c > start) out.push_back(s.substr(start, c - start));
    start = c + 1;
  }
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

int run_inspect(const std::vector<std::string>& args) {
  std::string path;
  int opset = 18;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--opset" && i + 1 < args.size())
      opset = parse_int(args[++i], "--opset");
    else if (!args[i].empty() && args[i][0] == '-')
      throw UsageError{"unknown option " + args[i]};
    else if (path.empty())
      path = args[i];
    else
      throw UsageError{"inspect takes one archive"};
  }
  if (path.empty()) throw UsageError{"inspect needs an archive path"};
  pt2onnx::ArchiveInfo info = pt2onnx::inspect(path, opset);
  std::printf("archive:        %s\n", path.c_str());
  std::printf("layout:         %s\n", info.layout.c_str());
  std::printf("schema version: %d.%d\n", info.schema_major, info.schema_minor);
  std::printf("torch version:  %s\n", info.torch_version.c_str());
  auto print_values = [](const char* title, const auto& values) {
    std::printf("%s:\n", title);
    for (auto& v : values) {
      std::string dims;
      for (size_t k = 0; k < v.dims.size(); ++k) dims += (k ? ", " : "") + v.dims[k];
      std::printf("  %-20s %s[%s]\n", v.name.c_str(), v.dtype.c_str(), dims.c_str());
    }
  };
  print_values("inputs", info.inputs);
  print_values("outputs", info.outputs);
  std::printf("weights:        %zu tensors, %s\n", info.weights,
              human_bytes(static_cast<double>(info.weight_bytes)).c_str());
  std::printf("operators:\n");
  for (auto& [t, n] : info.op_histogram) std::printf("  %6zu  %s\n", n, t.c_str());
  if (info.unsupported.empty()) {
    std::printf("all operators convert at opset %d\n", opset);
  } else {
    std::printf("not supported at opset %d:\n", opset);
    for (auto& t : info.unsupported) std::printf("  %s\n", t.c_str());
  }
  return kOk;
}

int run_show(const std::vector<std::string>& args) {
  std::string path;
  for (auto& a : args) {
    if (a.size() > 1 && a[0] == '-') throw UsageError{"unknown option " + a};
    if (!path.empty()) throw UsageError{"show takes one model"};
    path = a;
  }
  if (path.empty()) throw UsageError{"show needs an ONNX model path"};
  std::string text = pt2onnx::pretty_model_file(path);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kOk;
}

// The Python that converts TorchScript files: PT2ONNX_PYTHON, else the one
// installed beside this command (a pip install puts both in the environment's
// bin/), else python3 from PATH.
std::string python_for_torchscript() {
  if (const char* p = std::getenv("PT2ONNX_PYTHON"); p && *p) return p;
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir.resize(dir.rfind('/') + 1);
    for (const char* name : {"python3", "python"})
      if (::access((dir + name).c_str(), X_OK) == 0) return dir + name;
  }
  return "python3";
}

// A TorchScript file: its code runs only in PyTorch, so pt2onnx's Python
// converts it (python/pt2onnx/_torchscript_command.py), with these arguments.
// Returns only when Python cannot be started.
int run_torchscript(const std::string& input, const std::vector<std::string>& args) {
  static const char* bootstrap =
      "import importlib.util, sys\n"
      "if importlib.util.find_spec('torch') is None or importlib.util.find_spec('pt2onnx') is "
      "None:\n"
      "    sys.exit('pt2onnx: error: ' + sys.argv[1] + ' is a TorchScript model (torch.jit.save), "
      "whose code only PyTorch runs; this Python (' + sys.executable + ') cannot import ' + "
      "('torch' if importlib.util.find_spec('torch') is None else 'pt2onnx') + ': pip install "
      "torch pt2onnx (or set PT2ONNX_PYTHON to a Python that has them)')\n"
      "from pt2onnx._torchscript_command import main\n"
      "sys.exit(main(sys.argv[1:]))\n";
  std::string python = python_for_torchscript();
  std::vector<std::string> argv_s = {python, "-c", bootstrap, input};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr,
               "pt2onnx: error: %s is a TorchScript model (torch.jit.save), whose code only "
               "PyTorch runs, and no Python was found to run it (%s: %s): install Python with "
               "torch and pt2onnx, or set PT2ONNX_PYTHON\n",
               input.c_str(), python.c_str(), std::strerror(errno));
  return kConversionError;
}

int run_convert(const std::vector<std::string>& args) {
  std::string input, output;
  pt2onnx::Options o;
  bool quiet = false, verbose = false;
  std::vector<std::string> ts_inputs;  // --input: TorchScript files only
  size_t input_at = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw UsageError{a + " needs a value"};
      return args[++i];
    };
    // Values until the next option (for the name lists).
    auto values = [&](std::vector<std::string>& out) {
      if (i + 1 >= args.size() || args[i + 1].starts_with("-"))
        throw UsageError{a + " needs names"};
      while (i + 1 < args.size() && !args[i + 1].starts_with("-")) split_into(args[++i], out);
    };
    if (a == "-o" || a == "--output") {
      output = value();
    } else if (a == "--opset") {
      o.opset = parse_int(value(), "--opset");
    } else if (a == "--external-data") {
      std::string v = value();
      if (auto shard = pt2onnx::external_data_shards_from_string(v)) {
        o.external_data = pt2onnx::ExternalData::Always;
        o.external_data_shard_bytes = *shard;
      } else {
        auto mode = pt2onnx::external_data_from_string(v);
        if (!mode)
          throw UsageError{
              "--external-data must be auto, always, never or shards:SIZE (e.g. "
              "shards:2GB)"};
        o.external_data = *mode;
      }
    } else if (a == "--target") {
      auto t = pt2onnx::target_from_string(value());
      if (!t) throw UsageError{"--target must be standard or onnxruntime"};
      o.target = *t;
    } else if (a == "--dtype") {
      auto d = pt2onnx::output_dtype_from_string(value());
      if (!d) throw UsageError{"--dtype must be float32, float16 or bfloat16"};
      o.dtype = *d;
    } else if (a == "--quantize") {
      std::string why;
      auto q = pt2onnx::weight_quantization_from_string(value(), &why);
      if (!q) throw UsageError{"--quantize: " + why};
      o.quantize = *q;
    } else if (a == "--no-optimize") {
      o.optimize = false;
    } else if (a == "--fallback") {
      if (value() != "custom_domain") throw UsageError{"--fallback takes custom_domain"};
      o.fallback = pt2onnx::Options::Fallback::CustomDomain;
    } else if (a == "--functions") {
      o.custom_function_files.push_back(value());
    } else if (a == "--training") {
      auto mode = pt2onnx::training_mode_from_string(value());
      if (!mode) throw UsageError{"--training must be eval, training or preserve"};
      o.training = *mode;
    } else if (a == "--input-names") {
      values(o.input_names);
    } else if (a == "--output-names") {
      values(o.output_names);
    } else if (a == "--dim-name") {
      const std::string& spec = value();
      size_t colon = spec.rfind(':'), eq = spec.find('=');
      if (colon == std::string::npos || eq == std::string::npos || eq < colon || colon == 0 ||
          eq + 1 == spec.size())
        throw UsageError{"--dim-name wants INPUT:AXIS=NAME, got '" + spec + "'"};
      int axis = parse_int(spec.substr(colon + 1, eq - colon - 1), "--dim-name axis");
      o.input_dim_names[spec.substr(0, colon)][axis] = spec.substr(eq + 1);
    } else if (a == "--modules-as-functions") {
      const std::string& v = value();
      if (v == "all") {
        o.all_modules_as_functions = true;
      } else {
        split_into(v, o.modules_as_functions);
        if (o.modules_as_functions.empty())
          throw UsageError{"--modules-as-functions takes all or class names"};
      }
    } else if (a == "--inline") {
      o.inline_functions = true;
    } else if (a == "--input") {
      ts_inputs.push_back(value());
    } else if (a == "-q" || a == "--quiet") {
      quiet = true;
    } else if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError{"unknown option " + a};
    } else if (input.empty()) {
      input = a;
      input_at = i;
    } else {
      throw UsageError{"unexpected argument '" + a + "'"};
    }
  }
  if (input.empty()) throw UsageError{"no input archive"};
  if (o.opset < pt2onnx::kMinOpset || o.opset > pt2onnx::kMaxOpset)
    throw UsageError{"--opset must be in " + std::to_string(pt2onnx::kMinOpset) + ".." +
                     std::to_string(pt2onnx::kMaxOpset)};
  switch (pt2onnx::file_kind(input)) {
    case pt2onnx::FileKind::TorchScript:
      // Python checks the arguments, then the file's code (check_torchscript_file), and only
      // then loads it, which runs its code.
      return run_torchscript(input, [&] {
        std::vector<std::string> rest = args;
        rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(input_at));
        return rest;
      }());
    case pt2onnx::FileKind::TorchSave:
      throw std::runtime_error(input +
                               " is a torch.save file of pickled objects (a state dict, or a "
                               "whole module pickled with its class), not a model pt2onnx can "
                               "read: save the model with torch.export.save (.pt2) or "
                               "torch.jit.save (TorchScript)");
    case pt2onnx::FileKind::Pt2:
      if (!ts_inputs.empty())
        throw UsageError{
            "--input describes a TorchScript file's inputs; a .pt2 archive holds its own"};
      break;
    case pt2onnx::FileKind::NotAnArchive:
      break;  // the .pt2 reader names what is wrong with the file
  }
  if (output.empty()) {
    output = input;
    if (output.ends_with(".pt2")) output.resize(output.size() - 4);
    output += ".onnx";
  }

  // Progress on a terminal, once the conversion has run for a while.
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last = start;
  bool shown = false;
  if (!quiet && ::isatty(STDERR_FILENO)) {
    o.progress = [&](std::string_view stage, double fraction) {
      auto now = clock::now();
      if (now - start < std::chrono::milliseconds(500) ||
          (now - last < std::chrono::milliseconds(100) && fraction < 1.0))
        return;
      last = now;
      shown = true;
      std::fprintf(stderr, "\rpt2onnx: %.*s %3.0f%%", static_cast<int>(stage.size()), stage.data(),
                   fraction * 100);
      std::fflush(stderr);
    };
  }
  pt2onnx::Result r = pt2onnx::convert(input, output, o);
  if (shown) std::fprintf(stderr, "\r\033[K");
  double total = std::chrono::duration<double>(clock::now() - start).count();
  if (!quiet) {
    std::printf("wrote %s (opset %d, %zu nodes, %zu initializers, %s of weights", output.c_str(),
                r.opset, r.nodes, r.initializers,
                human_bytes(static_cast<double>(r.weight_bytes)).c_str());
    for (auto& d : r.data_paths) std::printf(", data in %s", d.c_str());
    std::printf(") in %.3f s\n", total);
  }
  if ((o.all_modules_as_functions || !o.modules_as_functions.empty()) && !o.inline_functions &&
      r.functions == 0)
    std::fprintf(stderr, "pt2onnx: warning: --modules-as-functions matched no module call\n");
  for (auto& op : r.fallback_ops)
    std::fprintf(stderr,
                 "pt2onnx: warning: %s (%d node%s, first at %s) has no converter: written "
                 "as a pkg.torch.ops node\n",
                 op.target.c_str(), op.count, op.count > 1 ? "s" : "", op.where.c_str());
  if (verbose) {
    for (auto& [stage, secs] : r.timings)
      std::printf("  %-9s %9.3f ms\n", stage.c_str(), secs * 1e3);
  }
  return kOk;
}

// Errors print as one line (scripts grep and log them line by line): the core's messages put
// the node, its cause and its source line on lines of their own; here they are joined by "; ".
std::string one_line(std::string_view msg) {
  std::string out;
  size_t start = 0;
  while (start <= msg.size()) {
    size_t nl = msg.find('\n', start);
    std::string_view line = msg.substr(start, nl == std::string_view::npos ? nl : nl - start);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front())))
      line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    if (!line.empty()) {
      if (!out.empty()) out += "; ";
      out += line;
    }
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty()) throw UsageError{"no input archive"};
    if (args[0] == "--version" || args[0] == "-V") {
      std::printf("pt2onnx %s\n", PT2ONNX_VERSION);
#ifdef PT2ONNX_MIMALLOC
      // The command's allocator (CMakeLists.txt: the core allocates a few
      // hundred times per node; mimalloc halves a large graph's optimize).
      std::printf("allocator: mimalloc %d.%d.%d\n", mi_version() / 100, mi_version() / 10 % 10,
                  mi_version() % 10);
#else
      std::printf("allocator: system malloc\n");
#endif
      return kOk;
    }
    if (args[0] == "--help" || args[0] == "-h") {
      usage(stdout);
      return kOk;
    }
    if (args[0] == "inspect") return run_inspect({args.begin() + 1, args.end()});
    if (args[0] == "show") return run_show({args.begin() + 1, args.end()});
    return run_convert(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "pt2onnx: error: %s (usage: pt2onnx --help)\n", one_line(e.what).c_str());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pt2onnx: error: %s\n", one_line(e.what()).c_str());
    return kConversionError;
  }
}
