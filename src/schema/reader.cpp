// Reads the ExportedProgram JSON with simdjson's DOM API: fast, well kept, and
// its error codes let every failure name the JSON path that caused it. A
// program's nodes and tensor values are parsed a batch at a time
// (json_split.h); the whole text only when it does not split or has an error.
#include <simdjson.h>
#include <sys/mman.h>
#include <unistd.h>

#include <limits>

#include "archive/mapped_file.h"
#include "pt2onnx/error.h"
#include "schema/json_split.h"
#include "schema/program.h"
#include "schema/reader_impl.h"

namespace pt2onnx::schema {

namespace {

// The JSON document for the shared reader (reader_impl.h).
struct JsonDoc {
  using Elem = simdjson::dom::element;
  using Obj = simdjson::dom::object;
  using Arr = simdjson::dom::array;
  bool object(Elem e, Obj& o) const { return !e.get_object().get(o); }
  bool array(Elem e, Arr& a) const { return !e.get_array().get(a); }
  bool string(Elem e, std::string_view& s) const { return !e.get_string().get(s); }
  bool int64(Elem e, int64_t& v) const { return !e.get_int64().get(v); }
  bool uint64(Elem e, uint64_t& v) const { return !e.get_uint64().get(v); }
  bool number(Elem e, double& d) const { return !e.get_double().get(d); }
  bool boolean(Elem e, bool& b) const { return !e.get_bool().get(b); }
  std::optional<Elem> at(Obj o, std::string_view key) const {
    Elem e;
    if (o.at_key(key).get(e) || e.is_null()) return std::nullopt;
    return e;
  }
  size_t size(Obj o) const { return o.size(); }
  std::pair<std::string_view, Elem> first(Obj o) const {
    auto kv = *o.begin();
    return {kv.key, kv.value};
  }
  Arr elements(Arr a) const { return a; }
  Obj items(Obj o) const { return o; }
  // A number's own value in messages; other kinds by name.
  std::string value_text(Elem e) const {
    switch (e.type()) {
      case simdjson::dom::element_type::INT64:
      case simdjson::dom::element_type::UINT64:
      case simdjson::dom::element_type::DOUBLE:
        return "the number " + simdjson::minify(e);
      default:
        return type_name(e);
    }
  }
  std::string type_name(Elem e) const {
    switch (e.type()) {
      case simdjson::dom::element_type::ARRAY:
        return "an array";
      case simdjson::dom::element_type::OBJECT:
        return "an object";
      case simdjson::dom::element_type::STRING:
        return "a string";
      case simdjson::dom::element_type::NULL_VALUE:
        return "null";
      case simdjson::dom::element_type::BOOL:
        return "a boolean";
      default:
        return "a number";
    }
  }
};

using Reader = detail::Reader<JsonDoc>;
using detail::Path;

// simdjson reports a bad number (too large for 64 bits, "1e400", "-") without
// its place; find the first number token it rejects and name it and its byte.
std::string locate_bad_number(std::string_view json) {
  simdjson::dom::parser one;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) continue;
    size_t end = json.find_first_not_of("+-.0123456789eE", i);
    if (end == std::string_view::npos) end = json.size();
    std::string_view tok = json.substr(i, end - i);
    simdjson::dom::element ignored;
    if (one.parse(simdjson::padded_string(tok)).get(ignored)) {
      size_t from = i > 60 ? i - 60 : 0;
      return ": " + std::string(tok.substr(0, 64)) + " at byte " + std::to_string(i) + " (after '" +
             std::string(json.substr(from, i - from)) + "')";
    }
    i = end - 1;
  }
  return {};
}

// simdjson reads up to SIMDJSON_PADDING bytes past the end of its input. When
// they lie in the page of the last byte they are readable memory, and the
// JSON is parsed where it lies instead of copied (a program's JSON is over a
// KB per node: bench/node_scaling.md). AddressSanitizer would report the
// read past the end, so sanitized builds always copy.
bool padding_readable(std::string_view json, size_t readable_after) {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return false;
#endif
#endif
  if (json.empty()) return false;
  if (readable_after >= simdjson::SIMDJSON_PADDING) return true;
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto last = reinterpret_cast<uintptr_t>(json.data() + json.size() - 1);
  return last % page + simdjson::SIMDJSON_PADDING < page;
}

simdjson::dom::element parse_json(simdjson::dom::parser& parser, std::string_view json,
                                  const std::string& source, size_t readable_after = 0) {
  simdjson::dom::element root;
  auto err =
      parser.parse(json.data(), json.size(), !padding_readable(json, readable_after)).get(root);
  if (err) {
    std::string where;
    if (err == simdjson::NUMBER_ERROR || err == simdjson::NUMBER_OUT_OF_RANGE)
      where = locate_bad_number(json);
    throw Error(source + ": malformed JSON: " + std::string(simdjson::error_message(err)) + where);
  }
  return root;
}

}  // namespace

const std::string& SharedText::empty_string() {
  static const std::string empty;
  return empty;
}

SharedText SharedText::Pool::get(std::string_view s) {
  SharedText t;
  if (s.empty()) return t;
  auto it = texts_.find(s);
  if (it == texts_.end()) {
    auto text = std::make_shared<const std::string>(s);
    it = texts_.emplace(std::string_view(*text), std::move(text)).first;
  }
  t.s_ = it->second;
  return t;
}

const Argument* Node::input(std::string_view arg_name) const {
  for (auto& in : inputs)
    if (in.name == arg_name) return &in.arg;
  return nullptr;
}

std::string Node::module_path() const {
  // "key,path,type;key,path,type": the innermost module is the last entry.
  const std::string& stack = nn_module_stack;
  if (stack.empty()) return {};
  size_t start = stack.rfind(';');
  std::string last = stack.substr(start == std::string::npos ? 0 : start + 1);
  size_t c1 = last.find(',');
  if (c1 == std::string::npos) return {};
  size_t c2 = last.find(',', c1 + 1);
  return last.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
}

std::string Node::source_line() const {
  // Frames run outermost first; the innermost frame outside torch itself is
  // the user's line that made this node.
  const std::string& trace = stack_trace;
  std::string best;
  size_t p = 0;
  while ((p = trace.find("File \"", p)) != std::string::npos) {
    size_t e = trace.find('\n', p);
    std::string frame = trace.substr(p, e == std::string::npos ? std::string::npos : e - p);
    size_t next = e == std::string::npos ? trace.size() : e + 1;
    if (e != std::string::npos) {
      size_t e2 = trace.find('\n', e + 1);
      std::string code =
          trace.substr(e + 1, e2 == std::string::npos ? std::string::npos : e2 - e - 1);
      size_t nb = code.find_first_not_of(' ');
      if (nb != std::string::npos && code.compare(nb, 5, "File ") != 0) {
        frame += ": " + code.substr(nb);
        next = e2 == std::string::npos ? trace.size() : e2 + 1;
      }
    }
    bool in_torch = frame.find("/torch/") != std::string::npos ||
                    frame.find("File \"torch/") != std::string::npos;
    if (!in_torch || best.empty()) best = frame;
    p = next;
  }
  return best;
}

std::vector<std::pair<std::string, PayloadEntry>> parse_payload_config(std::string_view json,
                                                                       const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parse_json(parser, json, source);
  JsonDoc doc;
  Reader r(doc, source);
  std::vector<std::pair<std::string, PayloadEntry>> out;
  simdjson::dom::object top = r.obj(root, "$");
  for (auto [fqn, v] : r.obj(r.req(top, "config", "$"), "$.config")) {
    Path p("$.config.", fqn);
    simdjson::dom::object o = r.obj(v, p);
    PayloadEntry e;
    e.path_name = r.str(r.req(o, "path_name", p), Path(p, ".path_name"));
    if (auto x = r.field(o, "is_param")) e.is_param = r.boolean(*x, Path(p, ".is_param"));
    if (auto x = r.field(o, "use_pickle")) e.use_pickle = r.boolean(*x, Path(p, ".use_pickle"));
    if (auto x = r.field(o, "tensor_meta"))
      e.tensor_meta = r.tensor_meta(*x, Path(p, ".tensor_meta"));
    out.emplace_back(std::string(fqn), std::move(e));
  }
  return out;
}

namespace {

// A batch of nodes or tensor values, as one JSON array or object text: the
// document tree of 1 MB of text is ~2.5 MB, reused batch after batch.
constexpr size_t kBatchBytes = 1 << 20;

// Parses `text` (room for simdjson's padding reserved past its end).
simdjson::dom::element parse_padded(simdjson::dom::parser& parser, std::string& text,
                                    const std::string& source) {
  text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  return parse_json(parser, text, source, text.capacity() - text.size());
}

// A split item's text (a node's; a tensor value's, its key beside it) and
// its size in a batch.
std::string_view item_text(std::string_view node) { return node; }
std::string_view item_text(const std::pair<std::string_view, std::string_view>& kv) {
  return kv.second;
}
size_t item_size(std::string_view node) { return node.size(); }
size_t item_size(const std::pair<std::string_view, std::string_view>& kv) {
  return kv.first.size() + kv.second.size();
}

// The program read from its split text (json_split.h): the skeleton, then
// the nodes and tensor values a batch at a time, so the document tree in
// memory is one batch's, not the whole text's. It fills the same Program as
// reading the whole text, in the same order; any error throws (the caller
// then reads the whole text, which names it as it always has). The pages of
// a mapped text are dropped as their batches are read.
Program read_split(ProgramSplit& split, std::string_view json, const std::string& source,
                   JsonPlace place, size_t batch_bytes) {
  simdjson::dom::parser parser;
  JsonDoc doc;
  Reader reader(doc, source);
  Program p = reader.program(parse_padded(parser, split.skeleton, source));
  std::string().swap(split.skeleton);
  auto drop = [&](std::string_view first, std::string_view last) {
    if (place.in_file)
      advise_pages(first.data(), static_cast<size_t>(last.data() + last.size() - first.data()),
                   MADV_DONTNEED, /*inner=*/true);
  };
  // Items [b, e) of `items` (e past the last that fits in batch_bytes, one
  // at least) as one text between `open` and `close`, parsed; `read` takes
  // the document, then the items' pages go.
  std::string text;
  auto batches = [&](const auto& items, char open, char close, auto&& append, auto&& read) {
    for (size_t b = 0; b < items.size();) {
      text.assign(1, open);
      size_t e = b;
      for (; e < items.size() && (e == b || text.size() + item_size(items[e]) < batch_bytes); ++e) {
        if (e > b) text += ',';
        append(items[e]);
      }
      text += close;
      read(parse_padded(parser, text, source));
      drop(item_text(items[b]), item_text(items[e - 1]));
      b = e;
    }
  };
  const Path graph("$.graph_module.graph");
  p.graph.nodes.reserve(split.nodes.size());
  size_t i = 0;
  batches(
      split.nodes, '[', ']', [&](std::string_view n) { text += n; },
      [&](simdjson::dom::element batch) {
        for (simdjson::dom::element n : batch.get_array())
          p.graph.nodes.push_back(reader.node(n, Path(graph, ".nodes", i++)));
      });
  std::vector<std::string_view>().swap(split.nodes);
  batches(
      split.tensor_values, '{', '}',
      [&](const auto& kv) { text.append(1, '"').append(kv.first).append("\":").append(kv.second); },
      [&](simdjson::dom::element batch) {
        for (auto [k, v] : batch.get_object())
          p.graph.tensor_values.emplace(
              std::string(k), reader.tensor_meta(v, Path(graph, ".tensor_values.", k), false));
      });
  if (place.in_file) advise_pages(json.data(), json.size(), MADV_DONTNEED, /*inner=*/true);
  return p;
}

Program read_whole(std::string_view json, const std::string& source, JsonPlace place) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parse_json(parser, json, source, place.readable_after);
  if (place.in_file) {
    // Whole pages inside the JSON only: the neighbouring entries may be in use.
    advise_pages(json.data(), json.size(), MADV_DONTNEED, /*inner=*/true);
  }
  JsonDoc doc;
  return Reader(doc, source).program(root);
}

}  // namespace

Program parse_program(std::string_view json, const std::string& source, JsonPlace place) {
  if (auto split = split_program(json)) {
    try {
      return read_split(*split, json, source, place, kBatchBytes);
    } catch (const Error&) {
      // Read again whole, below: its error names the cause as always.
    }
  }
  return read_whole(json, source, place);
}

namespace detail {

Program parse_program_split(std::string_view json, const std::string& source, size_t batch_bytes) {
  auto split = split_program(json);
  if (!split) throw Error(source + ": the text does not split");
  return read_split(*split, json, source, {}, batch_bytes);
}

Program parse_program_whole(std::string_view json, const std::string& source) {
  return read_whole(json, source, {});
}

}  // namespace detail

}  // namespace pt2onnx::schema
