// AdamW on the CPU backend: three steps worked out by hand (with weight decay and a
// grad_scale), ten steps against a line-by-line scalar transcription of
// torch.optim.AdamW, and errors that name the argument or hyper-parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fsdp/ops/adamw.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

TEST(OpAdamW, ThreeStepsByHand) {
  // lr 0.1, beta1 0.5, beta2 0.75, eps 0, weight_decay 0.5 (decay factor 1 - 0.1*0.5 =
  // 0.95), grad_scale 0.5. Bias corrections: bc1 = 0.5, 0.75, 0.875; bc2 = 0.25, 0.4375,
  // 0.578125 (= 1 - 0.75^t).
  //
  // Element A: p = 1, raw grads 4, 4, -4 (scaled: 2, 2, -2).
  //   t=1: p = 0.95;     m = 0.5*2 = 1;              v = 0.25*4 = 1
  //        mhat = 1/0.5 = 2, vhat = 1/0.25 = 4, update = 0.1*2/2 = 0.1   -> p = 0.85
  //   t=2: p = 0.8075;   m = 0.5 + 1 = 1.5;          v = 0.75 + 1 = 1.75
  //        mhat = 1.5/0.75 = 2, vhat = 1.75/0.4375 = 4, update 0.1      -> p = 0.7075
  //   t=3: p = 0.672125; m = 0.75 - 1 = -0.25;       v = 1.3125 + 1 = 2.3125
  //        mhat = -0.25/0.875 = -2/7, vhat = 2.3125/0.578125 = 4,
  //        update = 0.1*(-2/7)/2 = -1/70                                 -> p = 0.672125 + 1/70
  // Element B: p = -2, raw grads 2, -6, 0 (scaled: 1, -3, 0).
  //   t=1: p = -1.9;     m = 0.5;                    v = 0.25
  //        mhat = 1, vhat = 1, update 0.1                               -> p = -2
  //   t=2: p = -1.9;     m = 0.25 - 1.5 = -1.25;     v = 0.1875 + 2.25 = 2.4375 (39/16)
  //        mhat = -1.25/0.75 = -5/3, vhat = (39/16)/(7/16) = 39/7
  //        update = 0.1*(-5/3)/sqrt(39/7)                               -> p = -1.9 + (1/6)/sqrt(39/7)
  //   t=3: p = 0.95*p2;  m = -0.625;                 v = 0.75*39/16 = 117/64
  //        mhat = -0.625/0.875 = -5/7, vhat = (117/64)/(37/64) = 117/37
  //        update = 0.1*(-5/7)/sqrt(117/37)                             -> p = 0.95*p2 + (1/14)/sqrt(117/37)
  const double pB2 = -1.9 + (1.0 / 6.0) / std::sqrt(39.0 / 7.0);
  const double expect_p[3][2] = {{0.85, -2.0}, {0.7075, pB2}, {0.672125 + 1.0 / 70.0, 0.95 * pB2 + (1.0 / 14.0) / std::sqrt(117.0 / 37.0)}};
  const double expect_m[3][2] = {{1.0, 0.5}, {1.5, -1.25}, {-0.25, -0.625}};
  const double expect_v[3][2] = {{1.0, 0.25}, {1.75, 2.4375}, {2.3125, 117.0 / 64.0}};
  const double grads[3][2] = {{4, 2}, {4, -6}, {-4, 0}};

  // float64 reproduces the hand values to rounding (~1e-16; 1e-14 allows a few ops);
  // float32 to a few float ulps (~1e-7 relative; 1e-6 absolute on O(1) values).
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
    const Tensor p = Tensor::empty({2}, dt), g = Tensor::empty({2}, dt);
    const Tensor m = Tensor::zeros({2}, dt), v = Tensor::zeros({2}, dt);
    p.set({0}, 1.0);
    p.set({1}, -2.0);
    AdamWHyper h;
    h.lr = 0.1;
    h.beta1 = 0.5;
    h.beta2 = 0.75;
    h.eps = 0.0;
    h.weight_decay = 0.5;
    for (int t = 0; t < 3; ++t) {
      g.set({0}, grads[t][0]);
      g.set({1}, grads[t][1]);
      h.step = t + 1;
      adamw_update(p, g, m, v, h, 0.5);
      for (int64_t i = 0; i < 2; ++i) {
        EXPECT_NEAR(p.get({i}), expect_p[t][i], tol) << dtype_name(dt) << " step " << t + 1 << " elem " << i;
        EXPECT_NEAR(m.get({i}), expect_m[t][i], tol) << dtype_name(dt) << " step " << t + 1 << " elem " << i;
        EXPECT_NEAR(v.get({i}), expect_v[t][i], tol) << dtype_name(dt) << " step " << t + 1 << " elem " << i;
      }
    }
  }
}

// torch.optim.adamw._single_tensor_adamw (non-capturable, non-amsgrad), transcribed line by
// line into scalar double arithmetic.
struct TorchAdamW {
  double lr, beta1, beta2, eps, weight_decay;
  std::vector<double> param, exp_avg, exp_avg_sq;
  int64_t step = 0;

  void update(const std::vector<double>& grad) {
    step += 1;                                                     // step_t += 1
    for (size_t i = 0; i < param.size(); ++i) {
      param[i] *= 1 - lr * weight_decay;                           // param.mul_(1 - lr * wd)
      exp_avg[i] += (grad[i] - exp_avg[i]) * (1 - beta1);          // exp_avg.lerp_(grad, 1 - beta1)
      exp_avg_sq[i] = exp_avg_sq[i] * beta2 + (1 - beta2) * grad[i] * grad[i];  // mul_(beta2).addcmul_
    }
    const double bias_correction1 = 1 - std::pow(beta1, double(step));
    const double bias_correction2 = 1 - std::pow(beta2, double(step));
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    for (size_t i = 0; i < param.size(); ++i) {
      const double denom = std::sqrt(exp_avg_sq[i]) / bias_correction2_sqrt + eps;
      param[i] += -step_size * exp_avg[i] / denom;                 // param.addcdiv_(exp_avg, denom, -step_size)
    }
  }
};

TEST(OpAdamW, TenStepsMatchTorchTranscription) {
  // float32 state against the double transcription: each step adds ~1e-7 relative
  // rounding to p, m and v, so after 10 steps ~1e-6 bounds the norm-wise error. float64
  // differs only by association (lerp vs beta1*m + (1-beta1)*g): ~1e-15.
  const int64_t n = 1031;  // odd, and large enough for the parallel path with many threads
  for (DType dt : {DType::F32, DType::F64}) {
    const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
    const Tensor p = random_tensor({n}, dt, 1);
    const Tensor m = Tensor::zeros({n}, dt), v = Tensor::zeros({n}, dt);
    AdamWHyper h;
    h.lr = 3e-3;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay = 0.1;
    const double grad_scale = 0.8;  // e.g. a clipping coefficient
    TorchAdamW ref{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, {}, std::vector<double>(n), std::vector<double>(n)};
    for (int64_t i = 0; i < n; ++i) ref.param.push_back(p.get_flat(i));
    for (int t = 1; t <= 10; ++t) {
      const Tensor g = random_tensor({n}, dt, 100 + t, -0.01, 0.01);
      std::vector<double> scaled(n);
      for (int64_t i = 0; i < n; ++i) scaled[size_t(i)] = g.get_flat(i) * grad_scale;
      ref.update(scaled);
      h.step = t;
      adamw_update(p, g, m, v, h, grad_scale);
    }
    auto as_tensor = [&](const std::vector<double>& x) {
      Tensor t = Tensor::empty({n}, DType::F64);
      for (int64_t i = 0; i < n; ++i) t.set_flat(i, x[size_t(i)]);
      return t;
    };
    EXPECT_LT(rel_error(p, as_tensor(ref.param)), tol) << dtype_name(dt);
    EXPECT_LT(rel_error(m, as_tensor(ref.exp_avg)), tol) << dtype_name(dt);
    EXPECT_LT(rel_error(v, as_tensor(ref.exp_avg_sq)), tol) << dtype_name(dt);
  }
}

TEST(OpAdamW, BadArgumentsNameTheArgument) {
  const int64_t n = 8;
  const Tensor p = random_tensor({n}, DType::F32, 1), g = random_tensor({n}, DType::F32, 2);
  const Tensor m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
  const AdamWHyper h;
  expect_error([&] { adamw_update(p, Tensor::zeros({n + 1}, DType::F32), m, v, h); }, {"grad", "as many elements as param (8)"});
  expect_error([&] { adamw_update(p, g, Tensor::zeros({n}, DType::F64), v, h); }, {"exp_avg", "same dtype"});
  expect_error([&] { adamw_update(p, g, m, Tensor(), h); }, {"exp_avg_sq", "undefined"});
  expect_error([&] { adamw_update(Tensor::zeros({2 * n}, DType::F32).slice(0, 0, 2 * n, 2), g, m, v, h); },
               {"param must be contiguous"});
  expect_error([&] { adamw_update(p.to(DType::BF16), g.to(DType::BF16), m.to(DType::BF16), v.to(DType::BF16), h); },
               {"param", "float32"});
  auto with = [&](auto mutate) {
    AdamWHyper bad;
    mutate(bad);
    return bad;
  };
  expect_error([&] { adamw_update(p, g, m, v, with([](AdamWHyper& b) { b.beta1 = 1.0; })); }, {"beta1"});
  expect_error([&] { adamw_update(p, g, m, v, with([](AdamWHyper& b) { b.beta2 = -0.1; })); }, {"beta2"});
  expect_error([&] { adamw_update(p, g, m, v, with([](AdamWHyper& b) { b.lr = -1.0; })); }, {"lr"});
  expect_error([&] { adamw_update(p, g, m, v, with([](AdamWHyper& b) { b.eps = -1.0; })); }, {"eps"});
  expect_error([&] { adamw_update(p, g, m, v, with([](AdamWHyper& b) { b.weight_decay = -0.1; })); }, {"weight_decay"});
  expect_error([&] { adamw_update(p, g, m, v, with([](AdamWHyper& b) { b.step = 0; })); }, {"step"});
  expect_error([&] { adamw_update(p, g, m, v, h, std::numeric_limits<double>::infinity()); }, {"grad_scale"});
}

}  // namespace
}  // namespace fsdp::test
