// Stand-in for cuda_bf16.h in the emulation build: __nv_bfloat16 as 16 raw bits with the
// toolkit's conversions (round to nearest even; NaN becomes the canonical 0x7fff that
// cvt.rn.bf16.f32 produces). Kernels compute in float and convert at loads and stores, so
// no bf16 arithmetic operators are provided: a kernel that used them would compile here
// but not for sm_80 host code paths.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_fp16.h"

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f);
  operator float() const;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = uint32_t(h.__x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.__x = 0x7fff;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    h.__x = static_cast<unsigned short>(u >> 16);
  }
  return h;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
inline __nv_bfloat16::operator float() const { return __bfloat162float(*this); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
