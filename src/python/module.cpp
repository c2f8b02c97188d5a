// Python bindings (glue only): takes the program (torch's serde dataclass
// tree, or JSON bytes) and weight views from pt2onnx/_export.py and runs the
// C++ pipeline with the GIL released (taken again only to read the tree).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "archive/safetensors.h"
#include "core/pipeline.h"
#include "pt2onnx/pretty.h"
#include "pt2onnx/pt2onnx.h"
#include "python/program_object.h"

namespace nb = nanobind;

namespace {

// weights: list of (fqn, data_ptr, dtype, sizes, strides, available_bytes);
// data_ptr 0: a fake weight (meta device), taken from the source_* arguments
using WeightTuple = std::tuple<std::string, uintptr_t, std::string, std::vector<int64_t>,
                               std::vector<int64_t>, uint64_t>;

// custom_translation_table, recorded: (target, serialized FunctionProto)
using CustomFunctions = std::vector<std::pair<std::string, nb::bytes>>;

void set_custom(pt2onnx::Options& o, const CustomFunctions& functions) {
  for (auto& [target, proto] : functions)
    o.custom_functions.push_back(
        {target, std::string(static_cast<const char*>(proto.data()), proto.size())});
}

// The program: JSON bytes (torch.export.save's model.json), or the tree of
// torch's serde dataclasses read in place (program_object.h), for which the
// reader takes the GIL back; the pipeline runs without it.
// Either way `program` must stay alive while the reader runs.
pt2onnx::ProgramReader program_reader(const nb::object& program) {
  if (nb::isinstance<nb::bytes>(program)) {
    nb::bytes b = nb::borrow<nb::bytes>(program);
    std::string_view json(static_cast<const char*>(b.data()), b.size());
    return [json] { return pt2onnx::schema::parse_program(json, "ExportedProgram JSON"); };
  }
  return [obj = program.ptr()] {
    nb::gil_scoped_acquire gil;
    return pt2onnx::read_program_object(obj, "ExportedProgram");
  };
}

// [{"target", "count", "where", "converts_from"}, ...]
nb::list ops_list(const std::vector<pt2onnx::UnsupportedOp>& ops) {
  nb::list l;
  for (auto& op : ops) {
    nb::dict d;
    d["target"] = op.target;
    d["count"] = op.count;
    d["where"] = op.where;
    d["converts_from"] = op.converts_from;
    l.append(d);
  }
  return l;
}

nb::dict convert(
    nb::object program, const std::vector<WeightTuple>& weights, const std::string& output_path,
    int opset, bool optimize, const std::string& external_data,
    const std::vector<std::string>& input_names, const std::vector<std::string>& output_names,
    const std::map<std::string, std::map<int64_t, std::string>>& input_dim_names,
    const std::map<int64_t, std::map<int64_t, std::string>>& output_dim_names,
    const std::string& fallback, const CustomFunctions& custom_functions,
    const std::map<std::string, int64_t>& custom_opsets, const std::string& training,
    bool all_modules_as_functions, const std::vector<std::string>& modules_as_functions,
    bool inline_functions, const std::string& target, const std::string& dtype,
    const std::vector<std::string>& source_files, const std::vector<WeightTuple>& source_tensors,
    const std::map<std::string, std::vector<std::string>>& source_aliases, bool allow_unused,
    bool convert_floats, nb::object progress, uint64_t shard_bytes, bool in_memory,
    bool weights_by_reference, const std::string& quantize, bool export_params,
    bool keep_initializers_as_inputs, const std::map<std::string, std::string>& weight_names) {
  pt2onnx::Options o;
  o.export_params = export_params;
  o.keep_initializers_as_inputs = keep_initializers_as_inputs;
  o.weight_names = weight_names;
  std::string why;
  auto wq = pt2onnx::weight_quantization_from_string(quantize, &why);
  if (!wq) throw pt2onnx::Error(why);
  o.quantize = *wq;
  o.in_memory = in_memory;
  o.weights_by_reference = weights_by_reference;
  auto t = pt2onnx::target_from_string(target);
  if (!t) throw pt2onnx::Error("target must be 'standard' or 'onnxruntime', not '" + target + "'");
  o.target = *t;
  auto dt = pt2onnx::output_dtype_from_string(dtype);
  if (!dt)
    throw pt2onnx::Error("dtype must be 'float32', 'float16' or 'bfloat16', not '" + dtype + "'");
  o.dtype = *dt;
  set_custom(o, custom_functions);
  o.custom_opsets = custom_opsets;
  auto train = pt2onnx::training_mode_from_string(training);
  if (!train) throw pt2onnx::Error("training must be 'eval', 'training' or 'preserve'");
  o.training = *train;
  o.all_modules_as_functions = all_modules_as_functions;
  o.modules_as_functions = modules_as_functions;
  o.inline_functions = inline_functions;
  if (fallback == "custom_domain")
    o.fallback = pt2onnx::Options::Fallback::CustomDomain;
  else if (!fallback.empty())
    throw pt2onnx::Error("fallback must be None or 'custom_domain', not '" + fallback + "'");
  o.opset = opset;
  o.optimize = optimize;
  auto mode = pt2onnx::external_data_from_string(external_data);
  if (!mode) throw pt2onnx::Error("external_data must be 'auto', 'always' or 'never'");
  o.external_data = *mode;
  o.external_data_shard_bytes = shard_bytes;
  o.input_names = input_names;
  o.output_names = output_names;
  o.input_dim_names = input_dim_names;
  o.output_dim_names = output_dim_names;
  auto views = [](const std::vector<WeightTuple>& tuples) {
    pt2onnx::Weights w;
    w.reserve(tuples.size());
    for (auto& [name, ptr, dtype, sizes, strides, avail] : tuples)
      w.emplace(name, pt2onnx::WeightView{reinterpret_cast<const void*>(ptr), dtype, sizes, strides,
                                          avail});
    return w;
  };
  pt2onnx::Weights w = views(weights);
  pt2onnx::WeightSource source;
  source.safetensors_files = source_files;
  source.tensors = views(source_tensors);
  source.aliases = source_aliases;
  source.allow_unused = allow_unused;
  source.convert_floats = convert_floats;
  if (!progress.is_none()) {
    // Called from the converting thread (the GIL released around it); an
    // exception in the callback only stops the progress line.
    o.progress = [progress, failed = false](std::string_view stage, double fraction) mutable {
      if (failed) return;
      nb::gil_scoped_acquire gil;
      try {
        progress(std::string(stage), fraction);
      } catch (nb::python_error& e) {
        failed = true;
        e.discard_as_unraisable("pt2onnx progress callback");
      }
    };
  }
  pt2onnx::ProgramReader read = program_reader(program);
  pt2onnx::Result r;
  {
    nb::gil_scoped_release release;  // `program` stays alive: the caller holds it
    r = pt2onnx::convert_read_program(read, w, source, output_path, o);
  }
  nb::dict d;
  d["model_path"] = r.model_path;
  d["model_bytes"] =
      in_memory ? nb::object(nb::bytes(r.model_bytes.data(), r.model_bytes.size())) : nb::none();
  // (initializer, address, ONNX dtype, dims, bytes, buffer): buffer None for
  // the caller's own bytes, else a uint8 array over the bytes the conversion
  // made, which keeps them alive (no copy).
  nb::list refs;
  for (auto& m : r.memory_initializers) {
    nb::object buffer = nb::none();
    if (m.owner) {
      nb::capsule keep(new std::shared_ptr<const void>(m.owner), [](void* p) noexcept {
        delete static_cast<std::shared_ptr<const void>*>(p);
      });
      size_t shape[1] = {static_cast<size_t>(m.nbytes)};
      buffer = nb::cast(
          nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(const_cast<void*>(m.data), 1, shape, keep));
    }
    refs.append(nb::make_tuple(m.name, reinterpret_cast<uintptr_t>(m.data), m.dtype, m.dims,
                               m.nbytes, buffer));
  }
  d["memory_initializers"] = refs;
  d["data_paths"] = r.data_paths;
  d["opset"] = r.opset;
  d["ir_version"] = r.ir_version;
  d["nodes"] = r.nodes;
  d["initializers"] = r.initializers;
  d["functions"] = r.functions;
  d["weight_bytes"] = r.weight_bytes;
  d["timings"] = r.timings;
  d["fallback_ops"] = ops_list(r.fallback_ops);
  auto values = [](const std::vector<pt2onnx::ValueSummary>& vs) {
    nb::list l;
    for (auto& v : vs) l.append(nb::make_tuple(v.name, v.dtype, v.dims));
    return l;
  };
  d["inputs"] = values(r.inputs);
  d["outputs"] = values(r.outputs);
  d["node_histogram"] = r.node_histogram;
  return d;
}

nb::list unsupported_ops(nb::object program, int opset, const CustomFunctions& custom_functions) {
  pt2onnx::ProgramReader read = program_reader(program);
  pt2onnx::Options o;
  o.opset = opset;
  set_custom(o, custom_functions);
  std::vector<pt2onnx::UnsupportedOp> ops;
  {
    nb::gil_scoped_release release;
    ops = pt2onnx::unsupported_ops_of(read, o);
  }
  return ops_list(ops);
}

std::string pretty_file(const std::string& path) {
  nb::gil_scoped_release release;
  return pt2onnx::pretty_model_file(path);
}

std::string pretty_bytes(nb::bytes model, const std::string& source) {
  std::string_view b(static_cast<const char*>(model.data()), model.size());
  nb::gil_scoped_release release;  // `model` stays alive: the caller holds it
  return pt2onnx::pretty_model_bytes(b, source);
}

// name -> (dtype, shape) of every tensor of a checkpoint's safetensors files, from their headers
// alone (no tensor data is read), each header checked as a conversion checks it (its length,
// dtypes, shapes and byte ranges, names unique across the files): what hf.py compares a
// checkpoint's config.json with before it builds the model.
std::map<std::string, std::pair<std::string, std::vector<int64_t>>> safetensors_shapes(
    const std::vector<std::string>& paths) {
  nb::gil_scoped_release release;
  pt2onnx::SafetensorsFiles files(paths);
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> out;
  for (auto& [name, w] : files.tensors()) out.emplace(name, std::pair(w.dtype, w.sizes));
  return out;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "pt2onnx C++ core";
  nb::exception<pt2onnx::Error> conversion_error(m, "ConversionError", PyExc_RuntimeError);
  // The docs site's API reference is generated from these docstrings (mkdocstrings).
  conversion_error.attr("__doc__") =
      "Raised when a program cannot be converted (a RuntimeError).\n\n"
      "Its message is the C++ core's: it names the node, its aten target, the module path and "
      "the user's source line; ops without a converter are listed all at once (target, count, "
      "first source line). Nothing is written: a file that was at the output path before is "
      "left as it was.";
  m.def("convert", &convert, nb::arg("program"), nb::arg("weights"), nb::arg("output_path"),
        nb::arg("opset"), nb::arg("optimize"), nb::arg("external_data"), nb::arg("input_names"),
        nb::arg("output_names"), nb::arg("input_dim_names"), nb::arg("output_dim_names"),
        nb::arg("fallback") = "", nb::arg("custom_functions") = CustomFunctions{},
        nb::arg("custom_opsets") = std::map<std::string, int64_t>{},
        nb::arg("training") = "preserve", nb::arg("all_modules_as_functions") = false,
        nb::arg("modules_as_functions") = std::vector<std::string>{},
        nb::arg("inline_functions") = false, nb::arg("target") = "standard",
        nb::arg("dtype") = "float32", nb::arg("source_files") = std::vector<std::string>{},
        nb::arg("source_tensors") = std::vector<WeightTuple>{},
        nb::arg("source_aliases") = std::map<std::string, std::vector<std::string>>{},
        nb::arg("allow_unused") = false, nb::arg("convert_floats") = false,
        nb::arg("progress") = nb::none(), nb::arg("shard_bytes") = 0, nb::arg("in_memory") = false,
        nb::arg("weights_by_reference") = false, nb::arg("quantize") = "",
        nb::arg("export_params") = true, nb::arg("keep_initializers_as_inputs") = false,
        nb::arg("weight_names") = std::map<std::string, std::string>{});
  m.def(
      "external_data_shards",
      [](const std::string& spec) { return pt2onnx::external_data_shards_from_string(spec); },
      nb::arg("spec"));
  m.def("unsupported_ops", &unsupported_ops, nb::arg("program"), nb::arg("opset"),
        nb::arg("custom_functions") = CustomFunctions{});
  m.def("supported_targets", &pt2onnx::supported_targets, nb::arg("opset"),
        "The ATen targets (\"torch.ops.aten.conv2d.default\", ...) converted at an opset.\n\n"
        "Args:\n"
        "    opset: an opset from MIN_OPSET to MAX_OPSET.\n\n"
        "Returns:\n"
        "    list[str]: the targets, sorted.");
  m.def("safetensors_shapes", &safetensors_shapes, nb::arg("paths"),
        "The name, dtype and shape of every tensor of safetensors files, from their headers.\n\n"
        "Args:\n"
        "    paths: the files (the shards of one checkpoint).\n\n"
        "Returns:\n"
        "    dict[str, tuple[str, list[int]]]: name -> (torch dtype name, shape).\n\n"
        "Raises:\n"
        "    ConversionError: a file is not a regular file, or its header is malformed "
        "(named).");
  m.def("pretty_file", &pretty_file, nb::arg("path"));
  m.def("pretty_bytes", &pretty_bytes, nb::arg("model"), nb::arg("source"));
  m.def("ir_version_for_opset", &pt2onnx::ir_version_for_opset);
  m.def(
      "check_torchscript_file",
      [](const std::string& path) {
        nb::gil_scoped_release release;
        pt2onnx::check_torchscript_file(path);
      },
      nb::arg("path"),
      "Raises ConversionError, one line, when the TorchScript file at `path` holds code that "
      "is not tensor code (torch.jit.load would run it); read without running anything.");
  m.def("torchscript_op_refusal", &pt2onnx::torchscript_op_refusal, nb::arg("kind"));
  m.attr("__version__") = PT2ONNX_VERSION;
  m.attr("MIN_OPSET") = pt2onnx::kMinOpset;
  m.attr("MAX_OPSET") = pt2onnx::kMaxOpset;
}
