// Helpers for complex values, for every op family (see complex.cpp for how a
// complex value is carried: real components in a trailing dimension of 2).
#pragma once
#include <string>
#include <string_view>

#include "convert/context.h"

namespace pt2onnx {

// True when tensor argument `name` is complex in torch (its FX metadata says
// complex32/64/128); its ONNX value is then the [..., 2] real form.
bool is_complex_arg(const Ctx& c, std::string_view name);

// torch's rank of tensor argument `name` (`v` its ONNX value): one less than
// the carried form's for a complex tensor.
size_t torch_rank(const Ctx& c, std::string_view name, const std::string& v);

// Real (part 0) or imaginary (part 1) component of a carried complex value:
// [..., 2] -> [...].
std::string complex_part(Ctx& c, const std::string& v, int part);

// The carried complex value with real part `re` and imaginary part `im`
// (same real type; broadcast against each other like torch.complex).
std::string complex_make(Ctx& c, const std::string& re, const std::string& im);

// A real tensor as a carried complex value with zero imaginary part.
std::string complex_from_real(Ctx& c, const std::string& re);

// |z| of a carried complex value: [..., 2] -> [...].
std::string complex_abs(Ctx& c, const std::string& v);

// add / sub / mul / div (alpha of add / sub included) with a complex result:
// each operand is complex (carried form) or real (a tensor or a real scalar),
// computed on the components. `op` is "Add", "Sub", "Mul" or "Div"; operands
// are named `a` and `b`. Fails for a complex Python scalar operand.
void complex_arith(Ctx& c, const std::string& op, const char* a = "self", const char* b = "other");

// A tensor argument converted to type `t`, complex on either side included
// (real -> complex: zero imaginary part; complex -> real: the real part, as
// torch does). `t` is torch's dtype (Complex64, Float, ...).
std::string convert_dtype(Ctx& c, std::string_view name, DType t);

}  // namespace pt2onnx
