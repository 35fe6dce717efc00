// Counter-based random numbers: a value is a pure function of (key, index), so any slice
// of a tensor can be generated on its own (a rank initialising only its shard, a data
// worker producing sample i) and every random stream is derived from
// (seed, purpose, step, rank, ...) as DESIGN.md's "Deterministic and resumable" asks.
#pragma once

#include <cmath>
#include <cstdint>

namespace fsdp {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Combines words into one key, order-sensitive.
inline uint64_t mix_key(uint64_t a, uint64_t b) { return splitmix64(a ^ splitmix64(b + 0x632be59bd9b4e019ull)); }
inline uint64_t mix_key(uint64_t a, uint64_t b, uint64_t c) { return mix_key(mix_key(a, b), c); }

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(uint64_t key, uint64_t index) {
  return double(splitmix64(mix_key(key, index)) >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller from two counter draws.
inline double normal01(uint64_t key, uint64_t index) {
  const double u1 = 1.0 - uniform01(key, 2 * index);  // (0, 1]
  const double u2 = uniform01(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A small sequential generator for host-side work that needs a stream (data synthesis).
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}
  uint64_t next() { return splitmix64(state_++); }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

}  // namespace fsdp
