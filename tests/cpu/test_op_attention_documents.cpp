// Document-masked (block-causal) attention, Note [Document masking] in fsdp/ops/attention.h:
// the op with a doc_start against a dense-mask reference written here (forward and its
// analytic backward in float64, the mask an explicit [T, T] matrix built from the rows'
// document offsets), its backward against finite differences, packed rows against each
// document run alone, tiles of earlier documents never read, the plain causal path
// unchanged, and the offsets' checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/document_layouts.h"
#include "fsdp/ops/attention.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

struct Shape {
  int64_t B, T, H, KVH, D;
};

std::string describe(const Shape& s, const DocumentLayout& l) {
  std::string r = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
                  " KVH=" + std::to_string(s.KVH) + " D=" + std::to_string(s.D) + " documents per row:";
  for (const auto& row : l.starts) r += " " + std::to_string(row.size());
  return r;
}

struct Qkv {
  Tensor fused, q, k, v;
};
Qkv fused_qkv(const Shape& s, DType dt, uint64_t seed) {
  Qkv r;
  r.fused = random_tensor({s.B, s.T, (s.H + 2 * s.KVH) * s.D}, dt, seed);
  Tensor heads = r.fused.reshape({s.B, s.T, s.H + 2 * s.KVH, s.D});
  r.q = heads.narrow(2, 0, s.H);
  r.k = heads.narrow(2, s.H, s.KVH);
  r.v = heads.narrow(2, s.H + s.KVH, s.KVH);
  return r;
}

// The dense [B, T, T] mask: query i sees key j iff j <= i and both are in one document.
std::vector<char> dense_mask(const DocumentLayout& l, int64_t B) {
  const int64_t T = l.T;
  std::vector<char> m(size_t(B * T * T), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) m[size_t((b * T + i) * T + j)] = l.document_of(b, i) == l.document_of(b, j);
  return m;
}

struct Reference {
  Tensor out, lse, dq, dk, dv;
};

// Softmax attention under the dense mask in float64, and for dout its gradients:
//   P = softmax(mask(S)), dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = dS K / sqrt(D) ...
Reference dense_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                          const DocumentLayout& l) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KVH = k.size(2);
  const std::vector<char> mask = dense_mask(l, B);
  Reference r{Tensor::zeros({B, T, H, D}, DType::F64), Tensor::zeros({B, H, T}, DType::F64),
              Tensor::zeros({B, T, H, D}, DType::F64), Tensor::zeros({B, T, KVH, D}, DType::F64),
              Tensor::zeros({B, T, KVH, D}, DType::F64)};
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> P(size_t(T * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KVH);
      for (int64_t i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double s = -std::numeric_limits<double>::infinity();
          if (mask[size_t((b * T + i) * T + j)]) {
            s = 0;
            for (int64_t d = 0; d < D; ++d) s += q.get({b, i, h, d}) * k.get({b, j, kvh, d});
            s *= scale;
          }
          P[size_t(i * T + j)] = s;
          m = std::max(m, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += P[size_t(i * T + j)] = std::exp(P[size_t(i * T + j)] - m);
        for (int64_t j = 0; j < T; ++j) P[size_t(i * T + j)] /= sum;
        r.lse.set({b, h, i}, m + std::log(sum));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += P[size_t(i * T + j)] * v.get({b, j, kvh, d});
          r.out.set({b, i, h, d}, o);
        }
      }
      if (!dout.defined()) continue;
      for (int64_t i = 0; i < T; ++i) {
        double delta = 0;
        for (int64_t d = 0; d < D; ++d) delta += dout.get({b, i, h, d}) * r.out.get({b, i, h, d});
        for (int64_t j = 0; j < T; ++j) {
          const double p = P[size_t(i * T + j)];
          if (p == 0) continue;
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) dp += dout.get({b, i, h, d}) * v.get({b, j, kvh, d});
          const double ds = p * (dp - delta) * scale;
          for (int64_t d = 0; d < D; ++d) {
            r.dq.set({b, i, h, d}, r.dq.get({b, i, h, d}) + ds * k.get({b, j, kvh, d}));
            r.dk.set({b, j, kvh, d}, r.dk.get({b, j, kvh, d}) + ds * q.get({b, i, h, d}));
            r.dv.set({b, j, kvh, d}, r.dv.get({b, j, kvh, d}) + p * dout.get({b, i, h, d}));
          }
        }
      }
    }
  return r;
}

Reference run_op(const Qkv& in, const Tensor& dout, const Tensor& doc_start) {
  const Tensor& q = in.q;
  const DType dt = q.dtype();
  Reference g{Tensor::empty(q.sizes(), dt), Tensor::empty({q.size(0), q.size(2), q.size(1)}, stat_dtype(dt)),
              Tensor(), Tensor(), Tensor()};
  attention_forward(in.q, in.k, in.v, g.out, g.lse, doc_start);
  if (!dout.defined()) return g;
  // Gradients as views of one fused buffer, NaN first: backward must overwrite them.
  Tensor dfused = Tensor::empty(in.fused.sizes(), dt);
  dfused.fill_(std::numeric_limits<double>::quiet_NaN());
  const int64_t H = q.size(2), KVH = in.k.size(2);
  Tensor heads = dfused.reshape({q.size(0), q.size(1), H + 2 * KVH, q.size(3)});
  g.dq = heads.narrow(2, 0, H);
  g.dk = heads.narrow(2, H, KVH);
  g.dv = heads.narrow(2, H + KVH, KVH);
  attention_backward(dout, in.q, in.k, in.v, g.out, g.lse, g.dq, g.dk, g.dv, doc_start);
  return g;
}

struct Case {
  Shape shape;
  DocumentLayout layout;
};

// Random shapes and layouts, and the edge cases by name: one-token documents, a document
// filling the window, many documents, a boundary right at a query block or key tile edge.
std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({{1, 1, 2, 1, 8}, random_layout(1, 1, 0.0, 1)});                    // one token
  c.push_back({{2, 9, 4, 4, 8}, random_layout(2, 9, 1.0, 2)});                    // every token its own document
  c.push_back({{2, 13, 6, 2, 6}, random_layout(2, 13, 0.0, 3)});                  // a document filling each row
  c.push_back({{3, 17, 4, 1, 16}, random_layout(3, 17, 0.3, 4)});                 // MQA, many documents
  c.push_back({{2, 150, 2, 1, 64}, random_layout(2, 150, 0.05, 5)});              // three query blocks
  c.push_back({{1, 97, 2, 1, 128}, random_layout(1, 97, 0.02, 6)});               // key tiles of 32
  c.push_back({{1, 140, 3, 1, 32}, DocumentLayout{140, {{0, 1, 64, 65, 128, 139}}}});  // edges at block bounds
  c.push_back({{2, 70, 4, 2, 64}, DocumentLayout{70, {{0, 69}, {0, 35}}}});       // a one-token last document
  return c;
}

// float32 against float64: the op rounds q k^T after D products and sums <= 150 terms, the
// arithmetic of the causal op, held to the same bounds as in test_op_attention.cpp; a mask
// that let one key of another document through changes some rows by O(1).
TEST(OpAttentionDocuments, MatchesDenseMaskReference) {
  uint64_t seed = 10;
  for (const Case& c : cases()) {
    const Shape& s = c.shape;
    const Tensor doc_start = c.layout.doc_start();
    for (DType dt : {DType::F32, DType::F64}) {
      const Qkv in = fused_qkv(s, dt, ++seed);
      const Tensor dout = random_tensor({s.B, s.T, s.H, s.D}, dt, ++seed);
      const Reference ref = dense_reference(in.q, in.k, in.v, dout, c.layout);
      const Reference got = run_op(in, dout, doc_start);
      const double tol = dt == DType::F32 ? 2e-6 : 1e-12, gtol = dt == DType::F32 ? 1e-5 : 1e-11;
      const std::string what = describe(s, c.layout) + " " + dtype_name(dt);
      EXPECT_LT(rel_error(got.out, ref.out), tol) << what;
      EXPECT_LT(rel_error(got.lse, ref.lse), tol) << what;
      EXPECT_LT(rel_error(got.dq, ref.dq), gtol) << what;
      EXPECT_LT(rel_error(got.dk, ref.dk), gtol) << what;
      EXPECT_LT(rel_error(got.dv, ref.dv), gtol) << what;
    }
  }
}

// The analytic backward of the reference above is itself checked here, independently:
// central differences on the op in float64 (bounds as in test_op_attention.cpp).
TEST(OpAttentionDocuments, BackwardMatchesFiniteDifferences) {
  const Case cs[] = {{{1, 7, 4, 2, 5}, DocumentLayout{7, {{0, 1, 4}}}},
                     {{2, 70, 2, 1, 8}, DocumentLayout{70, {{0, 30, 66}, {0, 64}}}}};
  uint64_t seed = 50;
  for (const Case& c : cs) {
    const Shape& s = c.shape;
    const Tensor doc_start = c.layout.doc_start();
    const Qkv in = fused_qkv(s, DType::F64, ++seed);
    const Tensor w = random_tensor({s.B, s.T, s.H, s.D}, DType::F64, ++seed);
    const Reference g = run_op(in, w, doc_start);
    auto loss = [&] { return weighted_sum(run_op(in, Tensor(), doc_start).out, w); };
    EXPECT_LT(fd_rel_error(loss, in.q, g.dq, 1e-4, 64), 1e-7) << "dq " << describe(s, c.layout);
    EXPECT_LT(fd_rel_error(loss, in.k, g.dk, 1e-4, 64), 1e-7) << "dk " << describe(s, c.layout);
    EXPECT_LT(fd_rel_error(loss, in.v, g.dv, 1e-4, 64), 1e-7) << "dv " << describe(s, c.layout);
  }
}

// A document of a packed row gives what it gives as a row of its own (the property that
// makes packing invisible to training), and a document wholly before a query block is
// never read: NaN in every q, k, v of a leading 128-token document (a multiple of every
// query block and key tile) reaches none of the later documents' outputs or gradients.
TEST(OpAttentionDocuments, DocumentsAreIndependentAndEarlierTilesSkipped) {
  const Shape s{1, 200, 4, 2, 64};
  const DocumentLayout l{200, {{0, 128, 150, 151}}};
  const Qkv in = fused_qkv(s, DType::F64, 70);
  const Tensor dout = random_tensor({s.B, s.T, s.H, s.D}, DType::F64, 71);
  const Reference packed = run_op(in, dout, l.doc_start());
  const int64_t ends[] = {128, 150, 151, 200};
  for (size_t d = 0; d < 4; ++d) {
    const int64_t a = l.starts[0][d], n = ends[d] - a;
    Qkv alone;
    alone.fused = in.fused.narrow(1, a, n).clone();
    Tensor heads = alone.fused.reshape({1, n, s.H + 2 * s.KVH, s.D});
    alone.q = heads.narrow(2, 0, s.H);
    alone.k = heads.narrow(2, s.H, s.KVH);
    alone.v = heads.narrow(2, s.H + s.KVH, s.KVH);
    const Reference one = run_op(alone, dout.narrow(1, a, n).clone(), Tensor());
    // Same arithmetic on other row offsets (lanes of the vectorised sums shift): float64 rounding.
    EXPECT_LT(rel_error(packed.out.narrow(1, a, n), one.out), 1e-13) << "document " << d;
    EXPECT_LT(rel_error(packed.dq.narrow(1, a, n), one.dq), 1e-12) << "document " << d;
    EXPECT_LT(rel_error(packed.dk.narrow(1, a, n), one.dk), 1e-12) << "document " << d;
    EXPECT_LT(rel_error(packed.dv.narrow(1, a, n), one.dv), 1e-12) << "document " << d;
  }
  Qkv poisoned = fused_qkv(s, DType::F64, 70);
  poisoned.fused.narrow(1, 0, 128).fill_(std::numeric_limits<double>::quiet_NaN());
  const Reference p = run_op(poisoned, dout, l.doc_start());
  EXPECT_TRUE(same_bits(p.out.narrow(1, 128, 72), packed.out.narrow(1, 128, 72)));
  EXPECT_TRUE(same_bits(p.dq.narrow(1, 128, 72), packed.dq.narrow(1, 128, 72)));
  EXPECT_TRUE(same_bits(p.dk.narrow(1, 128, 72), packed.dk.narrow(1, 128, 72)));
  EXPECT_TRUE(same_bits(p.dv.narrow(1, 128, 72), packed.dv.narrow(1, 128, 72)));
}

// One document per row is the plain causal op: the same bits with and without doc_start
// (the path without documents is the one every existing golden test holds).
TEST(OpAttentionDocuments, OneDocumentPerRowIsCausalBitForBit) {
  const Shape s{2, 150, 6, 2, 64};
  const Qkv in = fused_qkv(s, DType::F32, 80);
  const Tensor dout = random_tensor({s.B, s.T, s.H, s.D}, DType::F32, 81);
  const Reference with = run_op(in, dout, random_layout(2, 150, 0.0, 1).doc_start());
  const Reference without = run_op(in, dout, Tensor());
  EXPECT_TRUE(same_bits(with.out, without.out));
  EXPECT_TRUE(same_bits(with.lse, without.lse));
  EXPECT_TRUE(same_bits(with.dq, without.dq));
  EXPECT_TRUE(same_bits(with.dk, without.dk));
  EXPECT_TRUE(same_bits(with.dv, without.dv));
}

TEST(OpAttentionDocuments, BitwiseIndependentOfThreadCount) {
  const Shape s{2, 150, 6, 2, 64};
  const Qkv in = fused_qkv(s, DType::F32, 90);
  const Tensor dout = random_tensor({s.B, s.T, s.H, s.D}, DType::F32, 91);
  const Tensor doc_start = random_layout(2, 150, 0.03, 92).doc_start();
  const std::vector<Reference> runs = under_thread_counts([&] { return run_op(in, dout, doc_start); });
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_TRUE(same_bits(runs[0].out, runs[r].out)) << "run " << r;
    EXPECT_TRUE(same_bits(runs[0].dq, runs[r].dq)) << "run " << r;
    EXPECT_TRUE(same_bits(runs[0].dk, runs[r].dk)) << "run " << r;
    EXPECT_TRUE(same_bits(runs[0].dv, runs[r].dv)) << "run " << r;
  }
}

TEST(OpAttentionDocuments, BadOffsetsAreRejected) {
  const Shape s{2, 5, 2, 1, 8};
  const Qkv in = fused_qkv(s, DType::F32, 95);
  Tensor out = Tensor::empty(in.q.sizes(), DType::F32), lse = Tensor::empty({s.B, s.H, s.T}, DType::F32);
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, out, lse, Tensor::zeros({s.B, s.T + 1}, DType::I32)),
                        "doc_start must have shape [2, 5]");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, out, lse, Tensor::zeros({s.B, s.T}, DType::I64)),
                        "doc_start must be int32");
  Tensor bad = random_layout(2, 5, 0.0, 1).doc_start();
  bad.at<int32_t>({1, 3}) = 2;  // token 3 in a document starting at 2, token 2's at 0
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, out, lse, bad), "doc_start[1, 3] = 2");
  const std::vector<int32_t> starts{0, 0, 3, 2};
  const std::vector<int64_t> first{0, 1, 4};
  EXPECT_ERROR_MENTIONS(make_doc_start(starts, first, 5), "row 1's document starts must increase within [0, 5)");
  const std::vector<int32_t> late{0, 1};
  EXPECT_ERROR_MENTIONS(make_doc_start(late, std::vector<int64_t>{0, 1, 2}, 5), "row 1's documents must start at 0");
}

}  // namespace
}  // namespace fsdp::test
