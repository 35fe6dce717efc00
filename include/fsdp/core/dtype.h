// Element types of tensors and the conversions between them.
// bf16 and f16 are stored as raw 16-bit patterns; conversions round to nearest even,
// keep NaN a NaN and handle subnormals, so a value survives f32 -> bf16 -> f32 as
// PyTorch's .to(torch.bfloat16) would leave it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fsdp {

// U8: raw bytes (NF4 codes, a frozen unit's byte buffer); gathered and copied, never summed.
enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U16, U32, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "bfloat16", ...
DType parse_dtype(std::string_view name);  // accepts "float32"/"f32"/"fp32", ...; throws on others
bool is_floating(DType t);

struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{uint16_t(u >> 16)};
}

float f16_to_float(f16 v);
f16 float_to_f16(float f);

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::U16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::U32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// The dtype of per-row statistics (RMSNorm's rstd, attention's log-sum-exp, per-token
// losses): float32 for every compute dtype, so bf16/fp16 runs keep exact-enough
// statistics, and float64 only for float64 compute (the finite-difference tests).
inline constexpr DType stat_dtype(DType compute) { return compute == DType::F64 ? DType::F64 : DType::F32; }

// Any element as double / from double (tests, fills, casts). Integer targets truncate.
double load_as_double(const void* p, DType t);
void store_from_double(void* p, DType t, double v);

}  // namespace fsdp
