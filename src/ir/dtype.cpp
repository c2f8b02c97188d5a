#include "ir/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "pt2onnx/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace pt2onnx {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float:
      return 4;
    case DType::UInt8:
      return 1;
    case DType::Int8:
      return 1;
    case DType::UInt16:
      return 2;
    case DType::Int16:
      return 2;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
    case DType::Float16:
      return 2;
    case DType::Double:
      return 8;
    case DType::UInt32:
      return 4;
    case DType::UInt64:
      return 8;
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
    case DType::Complex32:
      return 4;
    case DType::Float8E8M0:
    case DType::Int4:
    case DType::UInt4:
      return 1;
    case DType::BFloat16:
      return 2;
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
      return 1;
    default:
      return 0;
  }
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float:
      return "float32";
    case DType::UInt8:
      return "uint8";
    case DType::Int8:
      return "int8";
    case DType::UInt16:
      return "uint16";
    case DType::Int16:
      return "int16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::String:
      return "string";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "float16";
    case DType::Double:
      return "float64";
    case DType::UInt32:
      return "uint32";
    case DType::UInt64:
      return "uint64";
    case DType::Complex64:
      return "complex64";
    case DType::Complex128:
      return "complex128";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float8E4M3FN:
      return "float8_e4m3fn";
    case DType::Float8E4M3FNUZ:
      return "float8_e4m3fnuz";
    case DType::Float8E5M2:
      return "float8_e5m2";
    case DType::Float8E5M2FNUZ:
      return "float8_e5m2fnuz";
    case DType::Float8E8M0:
      return "float8_e8m0fnu";
    case DType::Complex32:
      return "complex32";
    case DType::Int4:
      return "int4";
    case DType::UInt4:
      return "uint4";
    default:
      return "undefined";
  }
}

bool is_floating(DType t) {
  switch (t) {
    case DType::Float:
    case DType::Float16:
    case DType::Double:
    case DType::BFloat16:
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
      return true;
    default:
      return false;
  }
}

bool is_integral(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
    case DType::UInt16:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt32:
    case DType::UInt64:
      return true;
    default:
      return false;
  }
}

bool is_complex(DType t) {
  return t == DType::Complex64 || t == DType::Complex128 || t == DType::Complex32;
}

DType complex_component(DType t) {
  switch (t) {
    case DType::Complex32:
      return DType::Float16;
    case DType::Complex64:
      return DType::Float;
    case DType::Complex128:
      return DType::Double;
    default:
      return DType::Undefined;
  }
}

DType complex_of(DType t) {
  switch (t) {
    case DType::Float16:
      return DType::Complex32;
    case DType::Float:
      return DType::Complex64;
    case DType::Double:
      return DType::Complex128;
    default:
      return DType::Undefined;
  }
}

DType dtype_from_schema(int64_t s) {
  // Table from torch/_export/serde/schema.py ScalarType.
  switch (s) {
    case 1:
      return DType::UInt8;
    case 2:
      return DType::Int8;
    case 3:
      return DType::Int16;
    case 4:
      return DType::Int32;
    case 5:
      return DType::Int64;
    case 6:
      return DType::Float16;
    case 7:
      return DType::Float;
    case 8:
      return DType::Double;
    case 9:
      return DType::Complex32;
    case 10:
      return DType::Complex64;
    case 11:
      return DType::Complex128;
    case 12:
      return DType::Bool;
    case 13:
      return DType::BFloat16;
    case 28:
      return DType::UInt16;
    case 29:
      return DType::Float8E4M3FN;
    case 30:
      return DType::Float8E5M2;
    case 31:
      return DType::Float8E4M3FNUZ;
    case 32:
      return DType::Float8E5M2FNUZ;
    case 33:
      return DType::Float8E8M0;
    case 34:
      return DType::UInt32;
    case 35:
      return DType::UInt64;
    default:
      return DType::Undefined;
  }
}

std::string_view schema_scalar_type_name(int64_t s) {
  static const std::array<std::string_view, 36> names{"UNKNOWN",
                                                      "BYTE",
                                                      "CHAR",
                                                      "SHORT",
                                                      "INT",
                                                      "LONG",
                                                      "HALF",
                                                      "FLOAT",
                                                      "DOUBLE",
                                                      "COMPLEXHALF",
                                                      "COMPLEXFLOAT",
                                                      "COMPLEXDOUBLE",
                                                      "BOOL",
                                                      "BFLOAT16",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "",
                                                      "UINT16",
                                                      "FLOAT8E4M3FN",
                                                      "FLOAT8E5M2",
                                                      "FLOAT8E4M3FNUZ",
                                                      "FLOAT8E5M2FNUZ",
                                                      "FLOAT8E8M0FNU",
                                                      "UINT32",
                                                      "UINT64"};
  if (s < 0 || s >= static_cast<int64_t>(names.size())) return {};
  return names[static_cast<size_t>(s)];
}

DType dtype_from_torch_name(std::string_view n) {
  if (n.starts_with("torch.")) n.remove_prefix(6);
  static const std::array<std::pair<std::string_view, DType>, 30> table{{
      {"float32", DType::Float},
      {"float", DType::Float},
      {"float64", DType::Double},
      {"double", DType::Double},
      {"float16", DType::Float16},
      {"half", DType::Float16},
      {"bfloat16", DType::BFloat16},
      {"uint8", DType::UInt8},
      {"int8", DType::Int8},
      {"int16", DType::Int16},
      {"short", DType::Int16},
      {"int32", DType::Int32},
      {"int", DType::Int32},
      {"int64", DType::Int64},
      {"long", DType::Int64},
      {"bool", DType::Bool},
      {"uint16", DType::UInt16},
      {"uint32", DType::UInt32},
      {"uint64", DType::UInt64},
      {"complex64", DType::Complex64},
      {"complex128", DType::Complex128},
      {"float8_e4m3fn", DType::Float8E4M3FN},
      {"float8_e5m2", DType::Float8E5M2},
      {"float8_e4m3fnuz", DType::Float8E4M3FNUZ},
      {"float8_e5m2fnuz", DType::Float8E5M2FNUZ},
      {"float8_e8m0fnu", DType::Float8E8M0},
      {"complex32", DType::Complex32},
      {"chalf", DType::Complex32},
      {"cfloat", DType::Complex64},
      {"cdouble", DType::Complex128},
  }};
  for (auto& [k, v] : table)
    if (k == n) return v;
  return DType::Undefined;
}

namespace {
int category(DType t) {
  if (t == DType::Bool) return 0;
  if (is_integral(t)) return 1;
  if (is_floating(t)) return 2;
  return 3;  // complex
}

DType promote_same_class(DType a, DType b);

// A complex type meeting a floating one: the complex type of the wider
// component (complex64 with float64 -> complex128).
DType widen_complex(DType complex_t, DType float_t) {
  DType c = complex_of(promote_same_class(complex_component(complex_t), float_t));
  return c == DType::Undefined ? DType::Complex64 : c;
}

// Promotion of two types of the same priority class (both tensors, ...).
DType promote_same_class(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca == 3 && cb == 2) return widen_complex(a, b);
  if (ca == 2 && cb == 3) return widen_complex(b, a);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) {
    // uint8 with a signed type -> the next signed type wide enough.
    auto rank = [](DType t) {
      switch (t) {
        case DType::Int8:
          return 1;
        case DType::UInt8:
          return 2;
        case DType::Int16:
          return 3;
        case DType::UInt16:
          return 3;
        case DType::Int32:
          return 4;
        case DType::UInt32:
          return 4;
        case DType::Int64:
          return 5;
        default:
          return 6;
      }
    };
    if ((a == DType::UInt8 && b == DType::Int8) || (a == DType::Int8 && b == DType::UInt8))
      return DType::Int16;
    return rank(a) >= rank(b) ? a : b;
  }
  if (ca == 2) {
    if ((a == DType::Float16 && b == DType::BFloat16) ||
        (a == DType::BFloat16 && b == DType::Float16))
      return DType::Float;
    auto width = [](DType t) { return dtype_size(t); };
    return width(a) >= width(b) ? a : b;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}
}  // namespace

DType promote_types(DType a, int a_dim, DType b, int b_dim) {
  // Higher-priority class wins unless the lower one is of a higher category:
  // then the result is the default type of that category.
  if (a_dim == b_dim) return promote_same_class(a, b);
  bool a_hi = a_dim > b_dim;
  DType hi = a_hi ? a : b, lo = a_hi ? b : a;
  int lo_dim = a_hi ? b_dim : a_dim;
  if (category(lo) <= category(hi)) return hi;
  if (lo_dim == 0) {
    // Python scalars: bool < int64 < float32 (default dtype) < complex64;
    // a complex scalar with a floating tensor keeps the tensor's width.
    if (category(lo) == 1) return DType::Int64;
    if (category(lo) == 2) return DType::Float;
    DType c = category(hi) == 2 ? complex_of(hi) : DType::Undefined;
    return c == DType::Undefined ? DType::Complex64 : c;
  }
  if (category(lo) == 3 && category(hi) == 2) return widen_complex(lo, hi);
  return lo;
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24
    float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  uint32_t bits =
      e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u)  // inf / nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  int e = static_cast<int>(mag >> 23) - 127 + 15;
  uint32_t m = mag & 0x7fffffu;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // subnormal half: h * 2^-24
    if (e < -10) return static_cast<uint16_t>(sign);
    m |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (m >> 13);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry reaches inf correctly
  return static_cast<uint16_t>(sign | h);
}

float bfloat16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(x >> 16);
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// float32 (or bfloat16, widened) -> float16 eight at a time with F16C, where
// the CPU has it (checked at run time: the build targets baseline x86-64).
// Same results as float_to_half after the +-65504 clamp: round to nearest
// even, subnormals, infinities; a group holding a NaN is left to the scalar
// code (F16C keeps NaN payload bits float_to_half drops). Returns how many
// leading values it converted.
__attribute__((target("avx2,f16c"))) size_t to_half_f16c(const uint8_t* src, bool bf16,
                                                         uint8_t* dst, size_t n) {
  const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 sign = _mm256_set1_ps(-0.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 f;
    if (bf16) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      f = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
    }
    if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q))) break;  // a NaN: scalar
    // Clamp finite values; keep infinities (min/max would clamp them too).
    __m256 c = _mm256_max_ps(_mm256_min_ps(f, hi), lo);
    __m256 is_inf = _mm256_cmp_ps(_mm256_andnot_ps(sign, f), inf, _CMP_EQ_OQ);
    c = _mm256_blendv_ps(c, f, is_inf);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return i;
}

// AVX2 through the compiler's check (it includes the OS saving the YMM
// registers); F16C from CPUID leaf 1 directly: clang 14's
// __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return yes;
}
#endif

}  // namespace

namespace {

void convert_floats_scalar(const uint8_t* src, DType from, uint8_t* dst, DType to, size_t n) {
  auto bad = [] { throw Error("internal: convert_floats between non-float types"); };
  auto load = [&](size_t i) -> float {
    uint16_t h;
    switch (from) {
      case DType::Float: {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        return f;
      }
      case DType::Float16:
        std::memcpy(&h, src + 2 * i, 2);
        return half_to_float(h);
      case DType::BFloat16:
        std::memcpy(&h, src + 2 * i, 2);
        return bfloat16_to_float(h);
      default:
        bad();
        return 0;
    }
  };
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  switch (to) {
    case DType::Float:
      for (size_t i = 0; i < n; ++i) {
        float f = load(i);
        std::memcpy(dst + 4 * i, &f, 4);
      }
      return;
    case DType::Float16:
      for (size_t i = 0; i < n; ++i) {
        float f = load(i);
        if (std::isfinite(f)) f = std::clamp(f, -65504.0f, 65504.0f);
        uint16_t h = float_to_half(f);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::BFloat16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = float_to_bfloat16(load(i));
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default:
      bad();
  }
}

}  // namespace

void convert_floats(const uint8_t* src, DType from, uint8_t* dst, DType to, size_t n) {
  if (from == DType::BFloat16 && to == DType::Float) {
    // Exact: bfloat16 is float32's top half. A plain loop the compiler vectorizes
    // (a bfloat16 checkpoint read as float32 goes through here).
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(dst + 4 * i, &bits, 4);
    }
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  if (to == DType::Float16 && (from == DType::Float || from == DType::BFloat16) && has_f16c()) {
    // Vector groups, then the rest (and any group from a NaN on) in scalar code.
    while (n >= 8) {
      size_t done = to_half_f16c(src, from == DType::BFloat16, dst, n);
      src += done * dtype_size(from);
      dst += done * 2;
      n -= done;
      if (n >= 8) {  // stopped at a group with a NaN: that group goes scalar
        convert_floats_scalar(src, from, dst, to, 8);
        src += 8 * dtype_size(from);
        dst += 16;
        n -= 8;
      }
    }
  }
#endif
  convert_floats_scalar(src, from, dst, to, n);
}

}  // namespace pt2onnx
