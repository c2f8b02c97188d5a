// The text format, for a model with one Linear + ReLU:
//
//   ir_version 8, producer pt2onnx 0.1.0
//   opsets: ai.onnx 18
//   graph main_graph
//   inputs: 1
//     x: float32[batch, 4]
//   initializers: 2, 60 bytes
//     fc.weight: float32[3, 4]
//     fc.bias: float32[3]
//   nodes: 2
//     %linear = Gemm[transB=1](%x, %fc.weight, %fc.bias)   # fc
//     %relu = Relu(%linear)
//   outputs: 1
//     relu: float32[batch, 3]
//
// then each function ("function domain::name(%a, %b) -> (%out) [attrs]" and
// its body). Nodes of a non-default domain print as domain::op_type; graph
// attributes print under their node as "name: graph g(inputs) -> (outputs)"
// with the body indented; an attribute referring to the caller's is "=@ref";
// an omitted input or output is "". Everything is in file order.
#include "onnx/pretty.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "archive/mapped_file.h"
#include "pt2onnx/pretty.h"

namespace pt2onnx {

namespace {

constexpr size_t kMaxInitializerLines = 20;
constexpr size_t kMaxListValues = 16;  // ints / floats / strings attributes
constexpr size_t kMaxTensorValues = 8;
constexpr size_t kMaxString = 120;

std::string human_bytes(uint64_t b) {
  std::string s = std::to_string(b) + " bytes";
  if (b < 1000000) return s;
  const char* units[] = {"KB", "MB", "GB", "TB"};
  double v = static_cast<double>(b) / 1000;
  int u = 0;
  while (v >= 1000 && u < 3) v /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, " (%.1f %s)", v, units[u]);
  return s + buf;
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  size_t n = std::min(s.size(), kMaxString);
  for (size_t i = 0; i < n; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  out += '"';
  if (n < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Shortest text that reads back as the same value; always with a '.' or
// exponent, so floats and ints differ.
template <typename F>
std::string float_text(F v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // "n": nan, inf
  return s;
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    uint32_t bits = sign | 0x7f800000u | (man << 13);
    std::memcpy(&f, &bits, 4);
    return f;
  } else {
    uint32_t bits = sign | ((exp + 112) << 23) | (man << 13);
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return sign ? -f : f;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Element i of a tensor as text; empty for types shown only by type.
std::string element_text(const TensorData& t, size_t i) {
  const uint8_t* p = t.bytes() + i * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::Float:
      return float_text(load<float>(p));
    case DType::Double:
      return float_text(load<double>(p));
    case DType::Float16:
      return float_text(half_to_float(load<uint16_t>(p)));
    case DType::BFloat16: {
      uint32_t bits = static_cast<uint32_t>(load<uint16_t>(p)) << 16;
      return float_text(load<float>(reinterpret_cast<const uint8_t*>(&bits)));
    }
    case DType::Int8:
      return std::to_string(load<int8_t>(p));
    case DType::UInt8:
      return std::to_string(load<uint8_t>(p));
    case DType::Int16:
      return std::to_string(load<int16_t>(p));
    case DType::UInt16:
      return std::to_string(load<uint16_t>(p));
    case DType::Int32:
      return std::to_string(load<int32_t>(p));
    case DType::UInt32:
      return std::to_string(load<uint32_t>(p));
    case DType::Int64:
      return std::to_string(load<int64_t>(p));
    case DType::UInt64:
      return std::to_string(load<uint64_t>(p));
    case DType::Bool:
      return load<uint8_t>(p) ? "true" : "false";
    default:
      return {};
  }
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string tensor_text(const TensorData& t) {
  std::string s = std::string(dtype_name(t.dtype)) + dims_text(t.dims);
  const size_t n = static_cast<size_t>(t.numel());
  if (!t.bytes() || !t.nbytes()) return s + (n ? "{...}" : "{}");
  if (n > kMaxTensorValues || element_text(t, 0).empty()) return s + "{...}";
  s += '{';
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + element_text(t, i);
  return s + '}';
}

template <typename T, typename F>
std::string list_text(const std::vector<T>& v, F&& one) {
  std::string s = "[";
  size_t shown = v.size() > kMaxListValues ? kMaxListValues / 2 : v.size();
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + one(v[i]);
  if (shown < v.size()) s += ", ... (" + std::to_string(v.size()) + " values)";
  return s + "]";
}

std::string attr_value(const Attr& a) {
  if (!a.ref.empty()) return "@" + a.ref;
  switch (a.kind) {
    case Attr::Kind::Int:
      return std::to_string(a.i);
    case Attr::Kind::Float:
      return float_text(a.f);
    case Attr::Kind::String:
      return quoted(a.s);
    case Attr::Kind::Ints:
      return list_text(a.ints, [](int64_t v) { return std::to_string(v); });
    case Attr::Kind::Floats:
      return list_text(a.floats, [](float v) { return float_text(v); });
    case Attr::Kind::Strings:
      return list_text(a.strings, [](const std::string& v) { return quoted(v); });
    case Attr::Kind::Tensor:
      return a.t ? tensor_text(*a.t) : "?";
    case Attr::Kind::Graph:
      return "<graph>";
  }
  return "?";
}

std::string value_name(const std::string& n) { return n.empty() ? "\"\"" : "%" + n; }

class Printer {
 public:
  explicit Printer(const ReadModel& m) : m_(m) {}

  std::string run() {
    header();
    graph_body(m_.graph, 0, true);
    for (auto& f : m_.graph.functions) function(f);
    return std::move(out_);
  }

 private:
  void line(int indent, const std::string& s) {
    out_.append(static_cast<size_t>(indent), ' ');
    out_ += s;
    out_ += '\n';
  }

  std::string type_of(const std::string& name, const ValueType& t) const {
    auto it = m_.other_types.find(name);
    return it != m_.other_types.end() ? it->second : value_type_text(t);
  }

  static std::string domain_name(const std::string& d) { return d.empty() ? "ai.onnx" : d; }

  std::string opsets(const std::map<std::string, int64_t>& o) const {
    std::string s;
    for (auto& [d, v] : o) s += (s.empty() ? "" : ", ") + domain_name(d) + " " + std::to_string(v);
    return s;
  }

  void header() {
    std::string h = "ir_version " + std::to_string(m_.ir_version);
    if (!m_.producer_name.empty() || !m_.producer_version.empty())
      h += ", producer " + m_.producer_name +
           (m_.producer_version.empty() ? "" : " " + m_.producer_version);
    if (!m_.domain.empty()) h += ", domain " + m_.domain;
    if (m_.model_version) h += ", model_version " + std::to_string(m_.model_version);
    line(0, h);
    line(0, "opsets: " + (m_.opset_imports.empty() ? "(none)" : opsets(m_.opset_imports)));
    if (!m_.doc.empty()) line(0, "doc: " + quoted(m_.doc));
    if (!m_.metadata_props.empty()) {
      line(0, "metadata:");
      for (auto& [k, v] : m_.metadata_props) line(2, k + " = " + quoted(v));
    }
  }

  std::string io_text(const GraphIO& io) const {
    return (io.name.empty() ? "\"\"" : io.name) + ": " + type_of(io.name, io.type);
  }

  std::string initializer_text(const Initializer& init) const {
    std::string s =
        init.name + ": " + std::string(dtype_name(init.data.dtype)) + dims_text(init.data.dims);
    auto it = m_.external.find(init.name);
    if (it != m_.external.end() && !init.data.bytes()) {
      const ExternalRef& r = it->second;
      s += "  external " + quoted(r.location) + " offset " + std::to_string(r.offset);
      if (r.length) s += ", " + std::to_string(*r.length) + " bytes";
    }
    return s;
  }

  uint64_t stored_bytes(const Initializer& init, bool* external) const {
    auto it = m_.external.find(init.name);
    if (it != m_.external.end() && !init.data.bytes()) {
      *external = true;
      return it->second.length ? *it->second.length : init.data.nbytes();
    }
    *external = false;
    return init.data.nbytes();
  }

  // The main graph (sections with counts) or a subgraph (its signature is
  // on the line before; its initializers and nodes follow).
  void graph_body(const Graph& g, int indent, bool main) {
    if (main) {
      line(indent, "graph " + (g.name.empty() ? "\"\"" : g.name));
      line(indent, "inputs: " + std::to_string(g.inputs.size()));
      for (auto& i : g.inputs) line(indent + 2, io_text(i));
      uint64_t total = 0, ext_bytes = 0;
      size_t ext = 0;
      for (auto& init : g.initializers) {
        bool is_ext = false;
        uint64_t b = stored_bytes(init, &is_ext);
        total += b;
        if (is_ext) ++ext, ext_bytes += b;
      }
      std::string h =
          "initializers: " + std::to_string(g.initializers.size()) + ", " + human_bytes(total);
      if (ext) h += ", " + std::to_string(ext) + " external (" + human_bytes(ext_bytes) + ")";
      line(indent, h);
      for (size_t k = 0; k < g.initializers.size() && k < kMaxInitializerLines; ++k)
        line(indent + 2, initializer_text(g.initializers[k]));
      if (g.initializers.size() > kMaxInitializerLines)
        line(indent + 2,
             "... " + std::to_string(g.initializers.size() - kMaxInitializerLines) + " more");
      if (m_.sparse_initializers)
        line(indent,
             "sparse initializers: " + std::to_string(m_.sparse_initializers) + " (not shown)");
      line(indent, "nodes: " + std::to_string(g.nodes.size()));
      for (auto& n : g.nodes) node(n, indent + 2);
      line(indent, "outputs: " + std::to_string(g.outputs.size()));
      for (auto& o : g.outputs) line(indent + 2, io_text(o));
      return;
    }
    for (auto& init : g.initializers)
      line(indent, "%" + init.name + " = initializer " + tensor_text(init.data));
    for (auto& n : g.nodes) node(n, indent);
  }

  void node(const Node& n, int indent) {
    std::string s;
    for (size_t i = 0; i < n.outputs.size(); ++i) s += (i ? ", " : "") + value_name(n.outputs[i]);
    if (!n.outputs.empty()) s += " = ";
    s += n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    std::string attrs;
    for (auto& a : n.attrs) {
      if (a.kind == Attr::Kind::Graph && a.ref.empty()) continue;  // printed below
      attrs += (attrs.empty() ? "" : ", ") + a.name + "=" + attr_value(a);
    }
    if (!attrs.empty()) s += "[" + attrs + "]";
    s += "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", " : "") + value_name(n.inputs[i]);
    s += ")";
    if (!n.module_path().empty()) s += "   # " + n.module_path();
    line(indent, s);
    for (auto& a : n.attrs) {
      if (a.kind != Attr::Kind::Graph || !a.ref.empty() || !a.g) continue;
      const Graph& g = *a.g;
      std::string sig = a.name + ": graph " + (g.name.empty() ? "\"\"" : g.name) + "(";
      for (size_t i = 0; i < g.inputs.size(); ++i) sig += (i ? ", " : "") + io_text(g.inputs[i]);
      sig += ") -> (";
      for (size_t i = 0; i < g.outputs.size(); ++i) sig += (i ? ", " : "") + io_text(g.outputs[i]);
      line(indent + 2, sig + ")");
      graph_body(g, indent + 4, false);
    }
  }

  void function(const Function& f) {
    out_ += '\n';
    std::string s = "function " + (f.domain.empty() ? f.name : f.domain + "::" + f.name) + "(";
    for (size_t i = 0; i < f.inputs.size(); ++i) s += (i ? ", " : "") + value_name(f.inputs[i]);
    s += ") -> (";
    for (size_t i = 0; i < f.outputs.size(); ++i) s += (i ? ", " : "") + value_name(f.outputs[i]);
    s += ")";
    std::string attrs;
    for (auto& name : f.attributes) {
      attrs += (attrs.empty() ? "" : ", ") + name;
      for (auto& d : f.attribute_defaults)
        if (d.name == name) attrs += "=" + attr_value(d);
    }
    if (!attrs.empty()) s += " [" + attrs + "]";
    line(0, s);
    if (!f.opset_imports.empty()) line(2, "opsets: " + opsets(f.opset_imports));
    if (!f.doc.empty()) line(2, "doc: " + quoted(f.doc));
    for (auto& n : f.nodes) node(n, 2);
  }

  const ReadModel& m_;
  std::string out_;
};

}  // namespace

std::string pretty(const ReadModel& m) { return Printer(m).run(); }

std::string pretty_model_bytes(std::string_view bytes, const std::string& source) {
  return pretty(read_model(bytes, source));
}

std::string pretty_model_file(const std::string& path) {
  MappedFile f(path);
  return pretty_model_bytes(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()),
                            path);
}

}  // namespace pt2onnx
