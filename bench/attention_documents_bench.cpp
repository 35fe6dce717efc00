// Document-masked attention on the CPU (bench/README.md, "Document masking"): forward +
// backward of one window of T tokens cut into N equal documents, against the same window
// as one causal document. The ceiling is the work that is left: N equal documents hold 1/N
// of the causal triangle's query-key pairs, so a kernel that skips whole key tiles of
// earlier documents (Note [Document masking] in fsdp/ops/attention.h) should approach
// time(N documents) / time(causal) = 1/N; one that only masked would stay at 1.
//
//   build/bench/attention_documents_bench [T] [repeats]    (default T = 2048, 5 repeats)
// Shape: Llama 2 7B's heads (32 of head dim 128), batch 1, float32; the time is the
// fastest repeat (a shared machine disturbs the minimum least).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fsdp/ops/attention.h"

namespace {

using fsdp::DType;
using fsdp::Tensor;

double seconds(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_start, int repeats) {
  const Tensor out = Tensor::empty(q.sizes(), DType::F32), dout = Tensor::empty(q.sizes(), DType::F32);
  const Tensor lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, DType::F32);
  const Tensor dq = Tensor::empty(q.sizes(), DType::F32), dk = Tensor::empty(k.sizes(), DType::F32),
               dv = Tensor::empty(v.sizes(), DType::F32);
  dout.fill_(0.01);
  double best = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {  // the first is a warm-up
    const auto t0 = std::chrono::steady_clock::now();
    fsdp::attention_forward(q, k, v, out, lse, doc_start);
    fsdp::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, doc_start);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t H = 32, D = 128;
  Tensor q = Tensor::empty({1, T, H, D}, DType::F32), k = Tensor::empty({1, T, H, D}, DType::F32),
         v = Tensor::empty({1, T, H, D}, DType::F32);
  for (const Tensor* t : {&q, &k, &v}) {
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  }
  const double causal = seconds(q, k, v, Tensor(), repeats);
  std::printf("attention forward + backward, B 1, T %lld, 32 heads of 128, float32 (fastest of %d)\n",
              static_cast<long long>(T), repeats);
  std::printf("%-22s %10s %18s %14s\n", "window", "ms", "vs one document", "ceiling 1/N");
  std::printf("%-22s %10.1f %18.3f %14.3f\n", "1 document (causal)", 1e3 * causal, 1.0, 1.0);
  for (int64_t n : {2, 4, 8}) {
    std::vector<int32_t> starts;
    for (int64_t d = 0; d < n; ++d) starts.push_back(int32_t(d * T / n));
    const std::vector<int64_t> first{0, n};
    const Tensor docs = fsdp::make_doc_start(starts, first, T);
    const double s = seconds(q, k, v, docs, repeats);
    std::printf("%-22s %10.1f %18.3f %14.3f\n", (std::to_string(n) + " equal documents").c_str(), 1e3 * s,
                s / causal, 1.0 / double(n));
  }
  return 0;
}
