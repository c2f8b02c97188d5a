// Element types, numbered as ONNX TensorProto.DataType, and the mapping from
// the torch.export schema's ScalarType numbering (which is NOT c10's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pt2onnx {

enum class DType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,  // two per byte, the first in the low nibble (packed_nbytes)
  Int4 = 22,
  Float8E8M0 = 24,
  // Not an ONNX type: torch's complex32 (chalf). Like every complex type it
  // only ever appears in FX metadata; its ONNX value is float16 [..., 2]
  // (see convert/complex.cpp), so this number never reaches a model file.
  Complex32 = 1009,
};

// Bytes per element; 1 for the 4-bit types, whose tensors hold two per
// byte (TensorData::nbytes counts them so).
size_t dtype_size(DType t);
inline bool is_4bit(DType t) { return t == DType::Int4 || t == DType::UInt4; }
std::string_view dtype_name(DType t);
bool is_floating(DType t);
bool is_integral(DType t);  // excludes Bool
bool is_complex(DType t);   // complex32 / complex64 / complex128
// Complex types and their components: complex64 <-> float32, complex128 <->
// float64, complex32 <-> float16; Undefined where there is none.
DType complex_component(DType complex_type);
DType complex_of(DType component);

// torch.export schema ScalarType (schema.py) -> ONNX type; Undefined if unknown.
DType dtype_from_schema(int64_t scalar_type);
// The schema's name of a ScalarType code ("COMPLEXHALF", "UINT64", ...), for
// messages; "" if the code is unknown.
std::string_view schema_scalar_type_name(int64_t scalar_type);

// float16 / bfloat16 bits <-> float; to 16 bits rounds to nearest, ties to even.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
// n values of float type `from` (Float, Float16, BFloat16) as type `to` (one
// of them too), rounded to nearest even; finite values beyond float16's range
// become +-65504 (as export(dtype=float16) converts weights).
void convert_floats(const uint8_t* src, DType from, uint8_t* dst, DType to, size_t n);

// Parses names as torch spells them in Python ("float32", "torch.int64", ...).
DType dtype_from_torch_name(std::string_view name);

// PyTorch's type promotion for two operands. `a_dim` / `b_dim` give each
// operand's category: 2 = tensor with dims, 1 = zero-dim tensor, 0 = Python scalar.
DType promote_types(DType a, int a_dim, DType b, int b_dim);

}  // namespace pt2onnx
