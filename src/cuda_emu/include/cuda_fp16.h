// Stand-in for cuda_fp16.h in the emulation build: __half as 16 raw bits with the
// toolkit's round-to-nearest-even conversions (subnormals kept, overflow to infinity,
// NaN to the canonical 0x7fff). As with bf16, kernels convert and compute in float.
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f);
  operator float() const;
};
struct __half2 {
  __half x, y;
};

inline float __half2float(__half h) {
  const uint32_t sign = uint32_t(h.__x & 0x8000u) << 16;
  uint32_t exp = (h.__x >> 10) & 0x1fu;
  uint32_t mant = h.__x & 0x3ffu;
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

inline __half __float2half_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  __half h;
  if (abs > 0x7f800000u) {
    h.__x = 0x7fff;
  } else if (abs >= 0x477ff000u) {  // rounds to infinity
    h.__x = static_cast<unsigned short>(sign | 0x7c00u);
  } else if (abs < 0x38800000u) {  // subnormal or zero in half: |f| < 2^-14
    if (abs < 0x33000000u) {  // below half the smallest subnormal
      h.__x = static_cast<unsigned short>(sign);
    } else {
      const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      const uint32_t drop = 126u - (abs >> 23);  // mant * 2^(e-150) in units of 2^-24
      uint32_t q = mant >> drop;
      const uint32_t rem = mant & ((1u << drop) - 1u);
      const uint32_t halfway = 1u << (drop - 1u);
      if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
      h.__x = static_cast<unsigned short>(sign | q);
    }
  } else {
    uint32_t q = ((abs >> 23) - 127 + 15) << 10 | ((abs >> 13) & 0x3ffu);
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry into the exponent is right
    h.__x = static_cast<unsigned short>(sign | q);
  }
  return h;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half::__half(float f) : __x(__float2half_rn(f).__x) {}
inline __half::operator float() const { return __half2float(*this); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}
