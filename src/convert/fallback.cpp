#include "convert/fallback.h"

namespace pt2onnx {

using schema::ArgKind;

CallArgs call_args(Ctx& c, const std::string& what) {
  const schema::Node& n = c.node;
  CallArgs r;
  auto& inputs = r.inputs;
  auto& attrs = r.attrs;
  for (const auto& in : n.inputs) {
    const schema::Argument& a = in.arg;
    switch (a.kind) {
      case ArgKind::None:
        inputs.push_back("");  // torch's None (an absent optional): keeps later inputs in place
        break;
      case ArgKind::Tensor:  // a present optional tensor too (an absent one is None)
        inputs.push_back(c.tensor(in.name));
        break;
      case ArgKind::Tensors:
      case ArgKind::OptionalTensors:  // "" for a None element
        for (auto& t : c.tensors(in.name)) inputs.push_back(t);
        break;
      case ArgKind::Int:
      case ArgKind::ScalarType:
        attrs.push_back(Attr::Int(in.name, a.i));
        break;
      case ArgKind::Bool:
        attrs.push_back(Attr::Int(in.name, a.b ? 1 : 0));
        break;
      case ArgKind::Float:
        attrs.push_back(Attr::Float(in.name, static_cast<float>(a.f)));
        break;
      case ArgKind::String:
      case ArgKind::MemoryFormat:
      case ArgKind::Layout:
      case ArgKind::Device:
        attrs.push_back(Attr::Str(in.name, a.s));
        break;
      case ArgKind::Ints:
        attrs.push_back(Attr::Ints(in.name, a.ints));
        break;
      case ArgKind::Bools: {
        std::vector<int64_t> v;
        for (bool x : a.bools) v.push_back(x ? 1 : 0);
        attrs.push_back(Attr::Ints(in.name, std::move(v)));
        break;
      }
      case ArgKind::Floats: {
        std::vector<float> v(a.floats.begin(), a.floats.end());
        attrs.push_back(Attr::Floats(in.name, std::move(v)));
        break;
      }
      case ArgKind::Strings: {
        Attr s;
        s.name = in.name;
        s.kind = Attr::Kind::Strings;
        s.strings = a.strings;
        attrs.push_back(std::move(s));
        break;
      }
      case ArgKind::SymInt:
      case ArgKind::SymInts: {
        // Known sizes are attributes; dynamic ones an int64 input.
        std::vector<int64_t> known;
        for (auto& s : a.symints)
          if (auto k = c.symint_const(s)) known.push_back(*k);
        if (known.size() == a.symints.size()) {
          if (a.kind == ArgKind::SymInt)
            attrs.push_back(Attr::Int(in.name, known.at(0)));
          else
            attrs.push_back(Attr::Ints(in.name, known));
        } else {
          inputs.push_back(a.kind == ArgKind::SymInt ? c.symint_value(a.symints.at(0))
                                                     : c.shape_tensor(a.symints));
        }
        break;
      }
      default:
        c.fail("cannot be written as " + what + ": argument '" + in.name + "' is " + a.variant);
    }
  }
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  return r;
}

void emit_custom_domain_node(Ctx& c) {
  const schema::Node& n = c.node;
  auto [inputs, attrs] = call_args(c, "a " + std::string(kTorchOpsDomain) + " node");
  std::vector<ValueType> types;
  for (size_t i = 0; i < c.n_outputs(); ++i) {
    if (c.find_meta(c.out_name(i)))
      types.push_back(c.out_type(i));
    else  // a SymInt result, or an unused output torch keeps no metadata for
      types.push_back(ValueType{DType::Int64, Shape{Dim::of(1)}});
  }
  const std::string prefix = "torch.ops.";
  std::string op = n.target.rfind(prefix, 0) == 0 ? n.target.substr(prefix.size()) : n.target;
  c.b.use_domain(kTorchOpsDomain, 1);
  auto outs = c.b.add_node(op, inputs, c.n_outputs(), std::move(attrs), types, kTorchOpsDomain);
  for (size_t i = 0; i < outs.size(); ++i)
    if (!c.out_name(i).empty()) c.set_output(i, outs[i]);
}

}  // namespace pt2onnx
