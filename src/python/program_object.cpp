// The Python document for the shared reader: torch's serde dataclasses read
// as the JSON torch would write for them (torch._export.serde.serialize's
// _dataclass_to_dict): a dataclass is an object of its fields, a _Union an
// object of its one set field, an IntEnum its integer, a tuple an array.
// Objects are read through object.__getattribute__ (the generic lookup), as
// the JSON writer does, not through _Union's own __getattribute__.
#include "python/program_object.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "pt2onnx/error.h"
#include "schema/reader_impl.h"

namespace pt2onnx {

namespace {

// What a Python type stands for in the document.
enum class Kind { Null, Bool, Int, Float, String, List, Tuple, Dict, Union, Dataclass, Other };

struct PyObj {
  PyObject* o = nullptr;
  Kind kind = Kind::Other;
};
using PyArr = PyObject*;  // a list or tuple

// Keys of a dict or the fields of a dataclass, with their values.
class Items {
 public:
  struct Item {
    std::string_view key;
    PyObject* value;
  };
  explicit Items(std::vector<Item> items) : items_(std::move(items)) {}
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
};

class Elements {
 public:
  // A list or a tuple (not resized while it is read).
  explicit Elements(PyObject* seq)
      : items_(PySequence_Fast_ITEMS(seq)),
        size_(static_cast<size_t>(PySequence_Fast_GET_SIZE(seq))) {}
  PyObject* const* begin() const { return items_; }
  PyObject* const* end() const { return items_ + size_; }

 private:
  PyObject* const* items_;
  size_t size_;
};

std::string_view utf8(PyObject* s) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (!p) {
    PyErr_Clear();
    return {};
  }
  return {p, static_cast<size_t>(n)};
}

class PyDoc {
 public:
  using Elem = PyObject*;
  using Obj = PyObj;
  using Arr = PyArr;

  PyDoc() {
    PyObject* mod = PyImport_ImportModule("torch._export.serde.union");
    if (mod) {
      union_class_ = PyObject_GetAttrString(mod, "_Union");
      Py_DECREF(mod);
    }
    if (!union_class_) {
      PyErr_Clear();
      throw Error("cannot import torch._export.serde.union._Union");
    }
  }
  ~PyDoc() {
    for (PyObject* o : keep_) Py_DECREF(o);
    for (auto& [t, info] : types_)
      for (PyObject* f : info.fields) Py_DECREF(f);
    for (auto& [k, o] : keys_) Py_DECREF(o);
    Py_XDECREF(union_class_);
  }
  PyDoc(const PyDoc&) = delete;
  PyDoc& operator=(const PyDoc&) = delete;

  bool object(Elem e, Obj& o) const {
    Kind k = kind(e);
    if (k != Kind::Dict && k != Kind::Union && k != Kind::Dataclass) return false;
    o = PyObj{e, k};
    return true;
  }
  bool array(Elem e, Arr& a) const {
    Kind k = kind(e);
    if (k != Kind::List && k != Kind::Tuple) return false;
    a = e;
    return true;
  }
  bool string(Elem e, std::string_view& s) const {
    if (!PyUnicode_Check(e)) return false;
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(e, &n);
    if (!p) {  // lone surrogates: not UTF-8, as json.dumps would not write them raw
      PyErr_Clear();
      return false;
    }
    s = std::string_view(p, static_cast<size_t>(n));
    return true;
  }
  bool int64(Elem e, int64_t& v) const {
    if (kind(e) != Kind::Int) return false;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(e, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    v = x;
    return true;
  }
  bool uint64(Elem e, uint64_t& v) const {
    if (kind(e) != Kind::Int) return false;
    unsigned long long x = PyLong_AsUnsignedLongLong(e);
    if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    v = x;
    return true;
  }
  bool number(Elem e, double& d) const {
    Kind k = kind(e);
    if (k == Kind::Float) {
      d = PyFloat_AS_DOUBLE(e);
      // JSON spells every NaN "NaN", read back as the one quiet NaN: the same
      // bits here (a NaN from inf * 0 has its sign bit set), or equal
      // constants would stop being merged.
      if (std::isnan(d)) d = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (k != Kind::Int) return false;
    d = PyLong_AsDouble(e);
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    return true;
  }
  bool boolean(Elem e, bool& b) const {
    if (!PyBool_Check(e)) return false;
    b = e == Py_True;
    return true;
  }

  std::optional<Elem> at(Obj o, std::string_view key) const {
    PyObject* v = nullptr;
    if (o.kind == Kind::Dict) {
      v = PyDict_GetItemWithError(o.o, key_object(key));  // borrowed
    } else {
      v = PyObject_GenericGetAttr(o.o, key_object(key));
      if (v) keep_.push_back(v);
    }
    if (!v) {
      PyErr_Clear();
      return std::nullopt;
    }
    if (v == Py_None) return std::nullopt;
    return v;
  }
  size_t size(Obj o) const {
    if (o.kind == Kind::Dict) return static_cast<size_t>(PyDict_Size(o.o));
    if (o.kind == Kind::Union) return 1;
    return type_info(Py_TYPE(o.o)).fields.size();
  }
  std::pair<std::string_view, Elem> first(Obj o) const {
    if (o.kind == Kind::Union) {
      PyObject* tag = PyObject_GenericGetAttr(o.o, key_object("_type"));
      if (!tag || !PyUnicode_Check(tag)) {
        PyErr_Clear();
        Py_XDECREF(tag);
        throw Error(std::string("a ") + Py_TYPE(o.o)->tp_name + " union with no tag");
      }
      keep_.push_back(tag);
      PyObject* v = PyObject_GenericGetAttr(o.o, tag);
      if (!v) {
        PyErr_Clear();
        v = Py_None;
        Py_INCREF(v);
      }
      keep_.push_back(v);
      return {utf8(tag), v};
    }
    Items all = items(o);
    auto it = all.begin();
    return {it->key, it->value};
  }
  Elements elements(Arr a) const { return Elements(a); }
  Items items(Obj o) const {
    std::vector<Items::Item> out;
    if (o.kind == Kind::Dict) {
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(o.o, &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
          throw Error(std::string("a dict key of type ") + Py_TYPE(k)->tp_name +
                      " (the program's maps are keyed by strings)");
        out.push_back({utf8(k), v});
      }
    } else if (o.kind == Kind::Union) {
      auto [k, v] = first(o);
      out.push_back({k, v});
    } else {
      for (PyObject* f : type_info(Py_TYPE(o.o)).fields) {
        PyObject* v = PyObject_GenericGetAttr(o.o, f);
        if (!v) {
          PyErr_Clear();
          continue;
        }
        keep_.push_back(v);
        out.push_back({utf8(f), v});
      }
    }
    return Items(std::move(out));
  }

  std::string type_name(Elem e) const {
    switch (kind(e)) {
      case Kind::List:
      case Kind::Tuple:
        return "an array";
      case Kind::Dict:
      case Kind::Union:
      case Kind::Dataclass:
        return "an object";
      case Kind::String:
        return "a string";
      case Kind::Null:
        return "null";
      case Kind::Bool:
        return "a boolean";
      case Kind::Int:
      case Kind::Float:
        return "a number";
      default:
        return std::string("a Python ") + Py_TYPE(e)->tp_name;
    }
  }
  std::string value_text(Elem e) const {
    Kind k = kind(e);
    if (k != Kind::Int && k != Kind::Float) return type_name(e);
    PyObject* r = PyObject_Repr(e);
    if (!r) {
      PyErr_Clear();
      return type_name(e);
    }
    std::string s = "the number " + std::string(utf8(r));
    Py_DECREF(r);
    return s;
  }

 private:
  struct TypeInfo {
    Kind kind = Kind::Other;
    std::vector<PyObject*> fields;  // a dataclass's field names, in order (owned)
  };

  Kind kind(PyObject* e) const {
    if (e == Py_None) return Kind::Null;
    if (PyBool_Check(e)) return Kind::Bool;  // before int: bool is an int
    if (PyLong_Check(e)) return Kind::Int;   // IntEnums too: JSON writes their value
    if (PyFloat_Check(e)) return Kind::Float;
    if (PyUnicode_Check(e)) return Kind::String;
    if (PyList_Check(e)) return Kind::List;
    if (PyTuple_Check(e)) return Kind::Tuple;
    if (PyDict_Check(e)) return Kind::Dict;
    return type_info(Py_TYPE(e)).kind;
  }

  // Unions and dataclasses, found once per type.
  const TypeInfo& type_info(PyTypeObject* t) const {
    auto it = types_.find(t);
    if (it != types_.end()) return it->second;
    TypeInfo info;
    int is_union = PyObject_IsSubclass(reinterpret_cast<PyObject*>(t), union_class_);
    if (is_union < 0) PyErr_Clear();
    PyObject* fields =
        PyObject_GetAttrString(reinterpret_cast<PyObject*>(t), "__dataclass_fields__");
    if (fields && PyDict_Check(fields)) {
      info.kind = is_union > 0 ? Kind::Union : Kind::Dataclass;
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(fields, &pos, &k, &v)) {
        // Only real fields (not ClassVar / InitVar pseudo-fields): their
        // _field_type is dataclasses._FIELD, whose repr is "_FIELD".
        PyObject* ft = PyObject_GetAttrString(v, "_field_type");
        bool real = true;
        if (ft) {
          PyObject* r = PyObject_Repr(ft);
          real = r && utf8(r) == "_FIELD";
          Py_XDECREF(r);
          Py_DECREF(ft);
        }
        PyErr_Clear();
        if (!real) continue;
        Py_INCREF(k);
        info.fields.push_back(k);
      }
    }
    PyErr_Clear();
    Py_XDECREF(fields);
    return types_.emplace(t, std::move(info)).first->second;
  }

  // Interned key strings, made once per key.
  PyObject* key_object(std::string_view key) const {
    auto it = keys_.find(key);
    if (it != keys_.end()) return it->second;
    PyObject* s = PyUnicode_FromStringAndSize(key.data(), static_cast<Py_ssize_t>(key.size()));
    if (!s) {
      PyErr_Clear();
      throw Error("cannot make a Python string for key '" + std::string(key) + "'");
    }
    PyUnicode_InternInPlace(&s);
    keys_.emplace(std::string(key), s);
    return s;
  }

  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  PyObject* union_class_ = nullptr;
  mutable std::unordered_map<PyTypeObject*, TypeInfo> types_;
  mutable std::unordered_map<std::string, PyObject*, KeyHash, std::equal_to<>> keys_;
  // New references from attribute lookups: values read stay alive until the
  // reading is done, whatever the object's attributes are.
  mutable std::vector<PyObject*> keep_;
};

}  // namespace

schema::Program read_program_object(PyObject* root, const std::string& source) {
  PyDoc doc;
  return schema::detail::Reader<PyDoc>(doc, source).program(root);
}

}  // namespace pt2onnx
