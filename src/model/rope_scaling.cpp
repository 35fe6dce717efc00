// RoPE frequencies with linear and Llama 3 scaling; the formulas are in rope_scaling.h.
#include "fsdp/model/rope_scaling.h"

#include <cmath>
#include <numbers>

#include "fsdp/core/error.h"

namespace fsdp::model {

std::string_view rope_scaling_name(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::None: return "none";
    case RopeScaling::Type::Linear: return "linear";
    case RopeScaling::Type::Llama3: return "llama3";
  }
  return "?";
}

RopeScaling::Type rope_scaling_type(std::string_view name) {
  for (RopeScaling::Type t : {RopeScaling::Type::None, RopeScaling::Type::Linear, RopeScaling::Type::Llama3})
    if (rope_scaling_name(t) == name) return t;
  FSDP_FAIL("rope scaling type '{}' is not supported (none, linear or llama3; dynamic, yarn, longrope and the other "
            "transformers types are not implemented)",
            name);
}

std::vector<double> rope_inv_freq(const LlamaConfig& cfg) {
  const int64_t D = cfg.head_dim();
  FSDP_CHECK(D > 0 && D % 2 == 0, "RoPE needs an even head dim, got {}", D);
  std::vector<double> f(size_t(D / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::pow(cfg.rope_theta, -2.0 * double(i) / double(D));
  const RopeScaling& s = cfg.rope_scaling;
  if (s.type == RopeScaling::Type::Linear) {
    for (double& x : f) x /= s.factor;
  } else if (s.type == RopeScaling::Type::Llama3) {
    const double L = double(s.original_max_position);
    const double low_freq_wavelen = L / s.low_freq_factor, high_freq_wavelen = L / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      if (wavelen > low_freq_wavelen) {
        x /= s.factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const double smooth = (L / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
  }
  return f;
}

RopeTables llama_rope_tables(const LlamaConfig& cfg, int64_t positions, Device device) {
  RopeTables t = make_rope_tables(positions, rope_inv_freq(cfg), Device::cpu());
  if (!device.is_cpu()) t = RopeTables{t.cos.to(device), t.sin.to(device)};
  return t;
}

}  // namespace fsdp::model
