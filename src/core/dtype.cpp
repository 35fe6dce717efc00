#include "fsdp/core/dtype.h"

#include "fsdp/core/error.h"

namespace fsdp {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::BF16: case DType::F16: case DType::U16: return 2;
    case DType::U8: return 1;
  }
  FSDP_FAIL("invalid dtype {}", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U16: return "uint16";
    case DType::U32: return "uint32";
    case DType::U8: return "uint8";
  }
  return "invalid";
}

DType parse_dtype(std::string_view s) {
  if (s == "float32" || s == "f32" || s == "fp32") return DType::F32;
  if (s == "float64" || s == "f64" || s == "fp64") return DType::F64;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  if (s == "float16" || s == "f16" || s == "fp16") return DType::F16;
  if (s == "int32" || s == "i32") return DType::I32;
  if (s == "int64" || s == "i64") return DType::I64;
  if (s == "uint16" || s == "u16") return DType::U16;
  if (s == "uint32" || s == "u32") return DType::U32;
  if (s == "uint8" || s == "u8") return DType::U8;
  FSDP_FAIL("unknown dtype '{}' (expected float32, float64, bfloat16, float16, int32, int64, uint16, uint32 or uint8)", s);
}

bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}

// IEEE half conversions by bit manipulation (exact, subnormals included).
float f16_to_float(f16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t mant = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: |f| < 2^-14
    if (abs < 0x33000000u) return f16{sign};  // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(e-150) and the f16 subnormal unit is 2^-24: drop (126 - e) bits.
    const uint32_t drop = 126u - (abs >> 23);
    uint32_t half = mant >> drop;
    const uint32_t rem = mant & ((1u << drop) - 1u);
    const uint32_t halfway = 1u << (drop - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return f16{uint16_t(sign | half)};
  }
  uint32_t h = ((abs >> 23) - 127 + 15) << 10 | ((abs >> 13) & 0x3ffu);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return f16{uint16_t(sign | h)};
}

double load_as_double(const void* p, DType t) {
  switch (t) {
    case DType::F32: return *static_cast<const float*>(p);
    case DType::F64: return *static_cast<const double*>(p);
    case DType::BF16: return bf16_to_float(*static_cast<const bf16*>(p));
    case DType::F16: return f16_to_float(*static_cast<const f16*>(p));
    case DType::I32: return *static_cast<const int32_t*>(p);
    case DType::I64: return double(*static_cast<const int64_t*>(p));
    case DType::U16: return *static_cast<const uint16_t*>(p);
    case DType::U32: return *static_cast<const uint32_t*>(p);
    case DType::U8: return *static_cast<const uint8_t*>(p);
  }
  FSDP_FAIL("invalid dtype {}", int(t));
}

void store_from_double(void* p, DType t, double v) {
  switch (t) {
    case DType::F32: *static_cast<float*>(p) = float(v); return;
    case DType::F64: *static_cast<double*>(p) = v; return;
    case DType::BF16: *static_cast<bf16*>(p) = float_to_bf16(float(v)); return;
    case DType::F16: *static_cast<f16*>(p) = float_to_f16(float(v)); return;
    case DType::I32: *static_cast<int32_t*>(p) = int32_t(v); return;
    case DType::I64: *static_cast<int64_t*>(p) = int64_t(v); return;
    case DType::U16: *static_cast<uint16_t*>(p) = uint16_t(v); return;
    case DType::U32: *static_cast<uint32_t*>(p) = uint32_t(v); return;
    case DType::U8: *static_cast<uint8_t*>(p) = uint8_t(v); return;
  }
  FSDP_FAIL("invalid dtype {}", int(t));
}

}  // namespace fsdp
