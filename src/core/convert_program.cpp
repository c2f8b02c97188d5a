// The pipeline after capture: read -> convert -> optimize -> write, timed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>

#include "convert/convert_graph.h"
#include "convert/custom_converters.h"
#include "core/pipeline.h"
#include "core/weight_source.h"
#include "ir/check_structure.h"
#include "onnx/model_writer.h"
#include "opt/passes.h"
#include "pt2onnx/pt2onnx.h"
#include "schema/program.h"

namespace pt2onnx {

std::optional<ExternalData> external_data_from_string(std::string_view s) {
  if (s == "auto") return ExternalData::Auto;
  if (s == "always") return ExternalData::Always;
  if (s == "never") return ExternalData::Never;
  return std::nullopt;
}

std::optional<uint64_t> external_data_shards_from_string(std::string_view s) {
  if (!s.starts_with("shards:")) return std::nullopt;
  s.remove_prefix(7);
  size_t digits = 0;
  uint64_t n = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') {
    if (n > (UINT64_MAX - 9) / 10) return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(s[digits++] - '0');
  }
  if (digits == 0) return std::nullopt;
  const std::string_view unit = s.substr(digits);
  static const std::pair<std::string_view, uint64_t> kUnits[] = {{"", 1},
                                                                 {"B", 1},
                                                                 {"KB", 1000},
                                                                 {"MB", 1000'000},
                                                                 {"GB", 1000'000'000},
                                                                 {"TB", 1000'000'000'000},
                                                                 {"KiB", 1ull << 10},
                                                                 {"MiB", 1ull << 20},
                                                                 {"GiB", 1ull << 30},
                                                                 {"TiB", 1ull << 40}};
  for (auto& [u, scale] : kUnits)
    if (unit == u) {
      if (n > UINT64_MAX / scale || n * scale < 4096) return std::nullopt;
      return n * scale;
    }
  return std::nullopt;
}

std::optional<TrainingMode> training_mode_from_string(std::string_view s) {
  if (s == "eval") return TrainingMode::Eval;
  if (s == "training") return TrainingMode::Training;
  if (s == "preserve") return TrainingMode::Preserve;
  return std::nullopt;
}

std::optional<Target> target_from_string(std::string_view s) {
  if (s == "standard") return Target::Standard;
  if (s == "onnxruntime") return Target::OnnxRuntime;
  return std::nullopt;
}

std::optional<OutputDType> output_dtype_from_string(std::string_view s) {
  if (s == "float32") return OutputDType::Float32;
  if (s == "float16") return OutputDType::Float16;
  if (s == "bfloat16") return OutputDType::BFloat16;
  return std::nullopt;
}

std::optional<WeightQuantization> weight_quantization_from_string(std::string_view s,
                                                                  std::string* error) {
  WeightQuantization q;
  auto fail = [&](const std::string& why) -> std::optional<WeightQuantization> {
    if (error) *error = why;
    return std::nullopt;
  };
  if (s.empty() || s == "none") return q;
  size_t comma = s.find(',');
  std::string_view kind = s.substr(0, comma);
  if (kind == "int4")
    q.bits = 4;
  else if (kind == "int8")
    q.bits = 8;
  else
    return fail("quantize must be 'int4' or 'int8', not '" + std::string(kind) + "'");
  while (comma != std::string_view::npos) {
    size_t next = s.find(',', comma + 1);
    std::string item(s.substr(comma + 1, next == std::string_view::npos ? next : next - comma - 1));
    comma = next;
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq),
                value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos && (key == "symmetric" || key == "asymmetric")) {
      q.symmetric = key == "symmetric";
      continue;
    }
    if (eq == std::string::npos && key == "embeddings") {
      q.embeddings = true;
      continue;
    }
    char* end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0')
      return fail("quantize setting '" + item + "': expected key=integer");
    if (key == "block_size")
      q.block_size = v;
    else if (key == "symmetric")
      q.symmetric = v != 0;
    else if (key == "accuracy_level" && v >= 0 && v <= 4)
      q.accuracy_level = static_cast<int>(v);
    else if (key == "embeddings")
      q.embeddings = v != 0;
    else
      return fail("quantize setting '" + item +
                  "': known are block_size, symmetric, asymmetric, accuracy_level (0-4), "
                  "embeddings");
  }
  return q;
}

int ir_version_for_opset(int opset) {
  // Lowest IR version released together with each opset (onnx VERSION_TABLE).
  if (opset <= 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  if (opset <= 23) return 11;
  if (opset <= 24) return 12;
  return 13;
}

namespace {

// The opset converters and passes work at: the requested one, or 13 when an
// older one is asked for (lowered at the end, lower_to_opset.cpp).
constexpr int kLowestConvertOpset = 13;

void check_opset(int opset) {
  if (opset < kMinOpset || opset > kMaxOpset)
    throw Error("opset " + std::to_string(opset) + " is not supported (this build emits " +
                std::to_string(kMinOpset) + ".." + std::to_string(kMaxOpset) + ")");
}

ValueSummary summary(const GraphIO& io) {
  ValueSummary v{io.name, std::string(dtype_name(io.type.dtype)), {}};
  if (io.type.shape)
    for (auto& d : *io.type.shape)
      v.dims.push_back(d.is_static() ? std::to_string(d.value) : d.sym.empty() ? "?" : d.sym);
  return v;
}

// Inputs, outputs and the op histogram of the written graph, for reports.
void summarize(const Graph& g, Result& r) {
  for (auto& i : g.inputs) r.inputs.push_back(summary(i));
  for (auto& o : g.outputs) r.outputs.push_back(summary(o));
  std::map<std::string, size_t> counts;
  std::vector<const Graph*> graphs{&g};
  while (!graphs.empty()) {
    const Graph* x = graphs.back();
    graphs.pop_back();
    for (auto& n : x->nodes) {
      ++counts[n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type];
      for (const Graph* s : subgraphs(n)) graphs.push_back(s);
    }
  }
  r.node_histogram.assign(counts.begin(), counts.end());
  std::stable_sort(r.node_histogram.begin(), r.node_histogram.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
}

}  // namespace

std::vector<UnsupportedOp> unsupported_ops(std::string_view program_json, int opset) {
  Options options;
  options.opset = opset;
  return unsupported_ops(program_json, options);
}

std::vector<UnsupportedOp> unsupported_ops(std::string_view program_json, const Options& options) {
  return unsupported_ops_of(
      [&] { return schema::parse_program(program_json, "ExportedProgram JSON"); }, options);
}

std::vector<UnsupportedOp> unsupported_ops_of(const ProgramReader& read, const Options& options) {
  check_opset(options.opset);
  const CustomConverters custom(options);
  // Opsets 11 and 12 convert at 13 (lower_to_opset.cpp says what has no older form).
  return find_unsupported(read(), std::max(options.opset, kLowestConvertOpset), &custom);
}

Result convert_program(std::string_view program_json, const Weights& weights,
                       const std::string& output_path, const Options& options) {
  return convert_program_from(program_json, "ExportedProgram JSON", weights, output_path, options);
}

Result convert_program(std::string_view program_json, const Weights& weights,
                       const WeightSource& source, const std::string& output_path,
                       const Options& options) {
  return convert_read_program(
      [&] { return schema::parse_program(program_json, "ExportedProgram JSON"); }, weights, source,
      output_path, options);
}

namespace {

Result convert_read(const ProgramReader& read, const Weights& weights,
                    const std::string& output_path, const Options& options);

}  // namespace

Result convert_read_program(const ProgramReader& read, const Weights& weights,
                            const WeightSource& source, const std::string& output_path,
                            const Options& options) {
  if (source.empty() && source.aliases.empty())
    return convert_read(read, weights, output_path, options);
  auto t0 = std::chrono::steady_clock::now();
  std::optional<SafetensorsFiles> files;
  if (!source.safetensors_files.empty()) files.emplace(source.safetensors_files);
  Weights resolved = resolve_weights(weights, source, files ? &*files : nullptr);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result r = convert_read(read, resolved, output_path, options);
  r.timings.insert(r.timings.begin(), {"weights", secs});
  return r;
}

Result convert_program_from(std::string_view program_json, const std::string& source,
                            const Weights& weights, const std::string& output_path,
                            const Options& options, schema::JsonPlace place) {
  return convert_read([&] { return schema::parse_program(program_json, source, place); }, weights,
                      output_path, options);
}

namespace {

Result convert_read(const ProgramReader& read, const Weights& weights,
                    const std::string& output_path, const Options& requested) {
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  check_opset(requested.opset);
  if (output_path.empty() && !requested.in_memory) throw Error("no output path given");
  const int written_opset = requested.opset;
  Options lowered;  // a copy only when the opset is older than the converters emit
  if (written_opset < kLowestConvertOpset) {
    lowered = requested;
    lowered.opset = kLowestConvertOpset;
  }
  const Options& options = written_opset < kLowestConvertOpset ? lowered : requested;

  Result r;
  r.opset = written_opset;
  r.ir_version = ir_version_for_opset(written_opset);

  // Anything but an Error escaping a stage is a bug of ours on input it did
  // not foresee: callers still get an Error naming the stage, never another
  // exception type (nor, from the CLI, a crash).
  auto stage = [&options](const char* name, auto&& fn) {
    if (options.progress) options.progress(name, 0.0);
    try {
      return fn();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(std::string("internal error while ") + name + " (" + e.what() +
                  "): please report it with this message");
    }
  };
  // The stage (and pass) that ran last, named by the structural check.
  std::string last = "converting";
  auto passes_ran = [&last](const char* stage_name,
                            const std::vector<std::pair<std::string, size_t>>& log) {
    last = log.empty() ? std::string(stage_name)
                       : stage_name + (" (last pass: " + log.back().first + ")");
  };
  auto t0 = clock::now();
  auto t1 = t0;
  Graph g;
  {
    schema::Program prog = stage("reading the program", [&] { return read(); });
    t1 = clock::now();
    g = stage("converting", [&] { return convert_graph(prog, weights, options); });
    if (options.fallback == Options::Fallback::CustomDomain) {
      const CustomConverters custom(options);  // parsed again: cheap next to converting
      r.fallback_ops = find_unsupported(prog, options.opset, &custom);
    }
  }  // the program (1.7 KB a node) goes here: no stage after the conversion reads it
  auto t2 = clock::now();
  const DType dtype = options.dtype == OutputDType::Float16    ? DType::Float16
                      : options.dtype == OutputDType::BFloat16 ? DType::BFloat16
                                                               : DType::Float;
  // The float type conversion runs once, last: with the last default passes
  // (after inlining, if any), or alone without `optimize`.
  const PassOptions pass_options{options.opset, options.target};
  const PassOptions last_passes{options.opset, options.target, dtype,
                                options.in_memory && options.weights_by_reference};
  const bool inlining = options.inline_functions;
  const bool module_functions =
      options.all_modules_as_functions || !options.modules_as_functions.empty();
  if (module_functions) {
    // Module calls become functions before CSE, which would merge equal
    // nodes of different calls (see extract_module_functions.cpp).
    if (options.optimize)
      stage("optimizing", [&] { passes_ran("optimizing", run_passes_before_functions(g)); });
    stage("making module functions", [&] {
      last = "extract_module_functions";
      return extract_module_functions(
          g, ModuleSelection{options.all_modules_as_functions, options.modules_as_functions},
          options.opset);
    });
  }
  // Functions kept (module functions, custom converters written as
  // functions) in a float16 model: the bodies are converted first, each as a
  // graph typed from the values it stood for, then the main graph, whose
  // calls then pass and return the target type (convert_float16.cpp).
  const bool functions_in_float16 = !inlining && dtype != DType::Float && !g.functions.empty();
  PassOptions main_passes = inlining ? pass_options : last_passes;
  if (functions_in_float16) main_passes.dtype = DType::Float;
  bool bodies_converted = false;
  if (options.optimize)
    stage("optimizing", [&] {
      passes_ran("optimizing", run_default_passes(g, main_passes));
      if (!module_functions) return;
      last = "optimize_function_bodies";
      optimize_function_bodies(g, inlining ? pass_options : last_passes);
      bodies_converted = true;
    });
  if (functions_in_float16)
    stage("converting to float16", [&] {
      if (!bodies_converted) {
        last = "convert_float16 (function bodies)";
        run_on_function_bodies(
            g, [&](Graph& body) { return convert_float16(body, dtype, options.opset); });
      }
      last = "convert_float16";
      return convert_float16(g, dtype, options.opset);
    });
  // Inlined bodies get the default passes again (CSE across former calls),
  // so the graph is the one a plain export writes.
  if (inlining)
    stage("inlining functions", [&] {
      const bool had_functions = !g.functions.empty();
      size_t n = had_functions ? inline_functions(g) : 0;
      last = "inline_functions";
      if (options.optimize && (had_functions || dtype != DType::Float))
        passes_ran("inlining functions", run_default_passes(g, last_passes));
      return n;
    });
  if (!options.optimize && dtype != DType::Float && !functions_in_float16)
    stage("converting to float16", [&] {
      last = "convert_float16";
      return convert_float16(g, dtype, options.opset);
    });
  // Last: the weights as every other pass left them (float16 included).
  if (options.quantize.bits)
    stage("quantizing weights", [&] {
      const PassOptions po{options.opset, options.target};
      last = "quantize_weights";
      size_t n = quantize_weights(g, options.quantize, po);
      // The MatMulNBits of one activation (gate / up) packed: their bytes
      // are small now, unlike the float weights before.
      if (options.optimize && fuse_sibling_matmuls(g, po)) n += remove_unused(g);
      return n;
    });
  if (written_opset < options.opset)
    stage("lowering to the opset", [&] {
      last = "lower_to_opset";
      lower_to_opset(g, written_opset);
      remove_unused(g);  // the axes constants that became attributes
    });
  auto t3 = clock::now();
  // Names settled once for the whole graph (name_nodes.cpp), then the rules
  // every consumer relies on, before a byte is written.
  stage("checking the graph", [&] {
    name_nodes(g);
    check_structure(g, written_opset, last);
  });
  auto t3c = clock::now();
  if (options.keep_initializers_as_inputs) {
    // torch.onnx's keep_initializers_as_inputs: each initializer also a graph
    // input (its value the default a caller may override). After the checks,
    // whose one-definition rule this relaxation of ONNX's would trip.
    for (auto& init : g.initializers) {
      Shape shape;
      for (int64_t d : init.data.dims) shape.push_back(Dim::of(d));
      g.inputs.push_back({init.name, ValueType{init.data.dtype, std::move(shape)}});
    }
  }
  // Model-local functions need IR version 8 (opsets 13 and 14 otherwise get 7).
  if (!g.functions.empty() && r.ir_version < 8) r.ir_version = 8;
  WriteOptions wo;
  wo.opset = written_opset;
  wo.ir_version = r.ir_version;
  wo.external_data = options.external_data;
  wo.external_data_threshold = options.external_data_threshold;
  wo.external_min_tensor_bytes = options.external_min_tensor_bytes;
  wo.shard_bytes = options.external_data_shard_bytes;
  wo.progress = options.progress;
  WriteResult w;
  if (options.in_memory)
    r.model_bytes = stage("writing", [&] {
      return write_model_bytes(g, wo, &w.weight_bytes,
                               options.weights_by_reference ? &r.memory_initializers : nullptr);
    });
  else
    w = stage("writing", [&] { return write_model(g, output_path, wo); });
  auto t4 = clock::now();

  if (!options.in_memory) r.model_path = output_path;
  r.data_paths = w.data_paths;
  r.weight_bytes = w.weight_bytes;
  r.nodes = g.nodes.size();
  r.initializers = g.initializers.size();
  r.functions = g.functions.size();
  summarize(g, r);
  r.timings = {{"read", secs(t0, t1)},
               {"convert", secs(t1, t2)},
               {"optimize", secs(t2, t3)},
               {"check", secs(t3, t3c)},
               {"write", secs(t3c, t4)}};
  return r;
}

}  // namespace

}  // namespace pt2onnx
