// Stand-in for mma.h in the emulation build: the subset of the CUDA C++ warp matrix
// functions (nvcuda::wmma) that the kernels use, with the semantics the CUDA Programming
// Guide documents, not the hardware's:
//   * fragment<matrix_a | matrix_b, 16, 16, 16, __nv_bfloat16 | __half, row_major | col_major>
//     and fragment<accumulator, 16, 16, 16, float>: a warp-wide 16 x 16 matrix of which
//     each lane holds num_elements = 8 elements in x[]. Which elements a lane holds is
//     unspecified by CUDA; here x[i] of lane l is element e = 32 i + l of the matrix in
//     row-major order (row e / 16, column e % 16), which is not the hardware's mapping, so
//     a kernel may only use x[] for operations that treat every element alike (scaling
//     an accumulator, converting), as CUDA allows;
//   * fill_fragment sets every element (per thread, as on a GPU: it is not a collective);
//   * load_matrix_sync, store_matrix_sync and mma_sync are warp collectives
//     (fsdp_emu::warp_matrix_op): all 32 lanes of the warp must reach the same one,
//     converged, with the same mptr, ldm and layout, or the launch fails, as a divergent
//     shuffle does. Each lane checks the documented argument rules first: mptr 256-bit
//     (32-byte) aligned, ldm a multiple of 8 elements for 16-bit types and of 4 for float
//     (16 bytes); a violation fails the launch with cudaErrorMisalignedAddress;
//   * mma_sync(d, a, b, c) computes D = A B + C with float accumulation: each product of
//     two 16-bit values is exact in float, and the 16 of an element are added to C's value
//     in order k = 0 .. 15, each addition rounded to float. A GPU's order and intermediate
//     precision differ (unspecified); results agree to float rounding, not bit for bit.
// Nothing else of mma.h (other shapes, integer, tf32 or double fragments, half
// accumulators) is provided: a kernel that needs more fails to compile here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace emu {
template <typename T>
constexpr bool is_16bit = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename L>
constexpr bool is_layout = std::is_same_v<L, row_major> || std::is_same_v<L, col_major>;
}  // namespace emu

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
class fragment {
  static_assert(m == 16 && n == 16 && k == 16, "the emulator's wmma implements the m16n16k16 shape only");
  static_assert(std::is_same_v<Use, accumulator>
                    ? std::is_same_v<T, float> && std::is_void_v<Layout>
                    : (std::is_same_v<Use, matrix_a> || std::is_same_v<Use, matrix_b>) && emu::is_16bit<T> &&
                          emu::is_layout<Layout>,
                "the emulator's wmma implements 16-bit (__half, __nv_bfloat16) matrix_a/matrix_b fragments with a "
                "row_major or col_major layout, and float accumulators");

 public:
  using element_type = T;
  enum { num_elements = 8 };
  T x[num_elements];
};

namespace emu {

constexpr int kLanes = 32;

// Lane `lane`'s x[i] is element (row, col) of the fragment's 16 x 16 matrix.
constexpr int row_of(int lane, int i) { return (kLanes * i + lane) / 16; }
constexpr int col_of(int lane, int i) { return (kLanes * i + lane) % 16; }

constexpr size_t offset(int row, int col, unsigned ldm, bool row_major_mem) {
  return row_major_mem ? size_t(row) * ldm + size_t(col) : size_t(col) * ldm + size_t(row);
}

// The per-lane argument rules of load_matrix_sync / store_matrix_sync.
template <typename T>
inline void check_args(const char* op, const void* mptr, unsigned ldm) {
  constexpr unsigned kLdmElems = 16 / unsigned(sizeof(T));  // 16 bytes: 8 16-bit or 4 float elements
  char why[192];
  if (reinterpret_cast<uintptr_t>(mptr) % 32 != 0) {
    std::snprintf(why, sizeof why, "%s: mptr %p is not 256-bit (32-byte) aligned", op, mptr);
    ::fsdp_emu::device_fault(cudaErrorMisalignedAddress, why);
  }
  if (ldm % kLdmElems != 0) {
    std::snprintf(why, sizeof why, "%s: ldm %u is not a multiple of %u elements (16 bytes) for a %zu-byte element type",
                  op, ldm, kLdmElems, sizeof(T));
    ::fsdp_emu::device_fault(cudaErrorMisalignedAddress, why);
  }
}

template <typename Frag, typename T>
void run_load(::fsdp_emu::WarpMatrixOp* const* lanes) {
  const T* p = static_cast<const T*>(lanes[0]->mem);
  const unsigned ldm = lanes[0]->ldm;
  const bool rm = lanes[0]->layout == mem_row_major;
  for (int l = 0; l < kLanes; ++l) {
    Frag& f = *static_cast<Frag*>(lanes[l]->frag[0]);
    for (int i = 0; i < Frag::num_elements; ++i) f.x[i] = p[offset(row_of(l, i), col_of(l, i), ldm, rm)];
  }
}

template <typename Frag>
void run_store(::fsdp_emu::WarpMatrixOp* const* lanes) {
  float* p = static_cast<float*>(const_cast<void*>(lanes[0]->mem));
  const unsigned ldm = lanes[0]->ldm;
  const bool rm = lanes[0]->layout == mem_row_major;
  for (int l = 0; l < kLanes; ++l) {
    const Frag& f = *static_cast<const Frag*>(lanes[l]->frag[0]);
    for (int i = 0; i < Frag::num_elements; ++i) p[offset(row_of(l, i), col_of(l, i), ldm, rm)] = f.x[i];
  }
}

// The warp's fragment `which` (0: d, 1: a, 2: b, 3: c) as a 16 x 16 float matrix.
template <typename Frag>
void gather(::fsdp_emu::WarpMatrixOp* const* lanes, int which, float (&out)[16][16]) {
  for (int l = 0; l < kLanes; ++l) {
    const Frag& f = *static_cast<const Frag*>(lanes[l]->frag[which]);
    for (int i = 0; i < Frag::num_elements; ++i) out[row_of(l, i)][col_of(l, i)] = float(f.x[i]);
  }
}

template <typename FragD, typename FragA, typename FragB, typename FragC>
void run_mma(::fsdp_emu::WarpMatrixOp* const* lanes) {
  float a[16][16], b[16][16], c[16][16];
  gather<FragA>(lanes, 1, a);
  gather<FragB>(lanes, 2, b);
  gather<FragC>(lanes, 3, c);  // all read before d (which may be c itself) is written
  for (int l = 0; l < kLanes; ++l) {
    FragD& d = *static_cast<FragD*>(lanes[l]->frag[0]);
    for (int i = 0; i < FragD::num_elements; ++i) {
      const int r = row_of(l, i), col = col_of(l, i);
      float acc = c[r][col];
      for (int kk = 0; kk < 16; ++kk) acc += a[r][kk] * b[kk][col];
      d.x[i] = acc;
    }
  }
}

template <typename L>
constexpr layout_t layout_of = std::is_same_v<L, row_major> ? mem_row_major : mem_col_major;

}  // namespace emu

template <typename Use, int m, int n, int k, typename T, typename Layout>
inline void fill_fragment(fragment<Use, m, n, k, T, Layout>& f, const T& v) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = v;
}

// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* mptr, unsigned ldm) {
  using Frag = fragment<Use, 16, 16, 16, T, Layout>;
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  emu::check_args<T>("wmma::load_matrix_sync", mptr, ldm);
  ::fsdp_emu::WarpMatrixOp op{"wmma::load_matrix_sync", &emu::run_load<Frag, T>, mptr, ldm,
                              emu::layout_of<Layout>, {&f, nullptr, nullptr, nullptr}};
  ::fsdp_emu::warp_matrix_op(&op);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* mptr, unsigned ldm,
                             layout_t layout) {
  using Frag = fragment<accumulator, 16, 16, 16, float>;
  emu::check_args<float>("wmma::load_matrix_sync", mptr, ldm);
  ::fsdp_emu::WarpMatrixOp op{"wmma::load_matrix_sync", &emu::run_load<Frag, float>, mptr, ldm, layout,
                              {&f, nullptr, nullptr, nullptr}};
  ::fsdp_emu::warp_matrix_op(&op);
}

inline void store_matrix_sync(float* mptr, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  using Frag = fragment<accumulator, 16, 16, 16, float>;
  emu::check_args<float>("wmma::store_matrix_sync", mptr, ldm);
  ::fsdp_emu::WarpMatrixOp op{"wmma::store_matrix_sync", &emu::run_store<Frag>, mptr, ldm, layout,
                              {const_cast<Frag*>(&f), nullptr, nullptr, nullptr}};
  ::fsdp_emu::warp_matrix_op(&op);
}

template <typename T, typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  using Acc = fragment<accumulator, 16, 16, 16, float>;
  using FragA = fragment<matrix_a, 16, 16, 16, T, LayoutA>;
  using FragB = fragment<matrix_b, 16, 16, 16, T, LayoutB>;
  // mma_sync has no memory operand: mem, ldm and layout are the same in every lane.
  ::fsdp_emu::WarpMatrixOp op{"wmma::mma_sync",
                              &emu::run_mma<Acc, FragA, FragB, Acc>,
                              nullptr,
                              0,
                              0,
                              {&d, const_cast<FragA*>(&a), const_cast<FragB*>(&b), const_cast<Acc*>(&c)}};
  ::fsdp_emu::warp_matrix_op(&op);
}

}  // namespace wmma
}  // namespace nvcuda
