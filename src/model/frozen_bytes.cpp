// A unit's frozen bytes from values and back; see frozen_bytes.h.
#include "fsdp/model/frozen_bytes.h"

#include <algorithm>
#include <cstring>

#include "fsdp/core/error.h"

namespace fsdp::model {

namespace {

// Copies the part of `src` (the bytes of [src_begin, src_begin + src.nbytes()) of the
// frozen buffer) that falls into out's range [begin, begin + out.numel()).
void copy_overlap(const void* src, int64_t src_begin, int64_t src_bytes, const Tensor& out, int64_t begin) {
  const int64_t lo = std::max(begin, src_begin), hi = std::min(begin + out.numel(), src_begin + src_bytes);
  if (lo >= hi) return;
  std::memcpy(out.data<uint8_t>() + (lo - begin), static_cast<const uint8_t*>(src) + (lo - src_begin),
              size_t(hi - lo));
}

void fill_dense(const FrozenSlot& s, const Tensor& out, int64_t begin, FrozenSource& source) {
  const int64_t es = int64_t(dtype_size(s.dtype));
  const int64_t lo = std::max(begin, s.byte_offset), hi = std::min(begin + out.numel(), s.byte_offset + s.bytes);
  if (lo >= hi) return;
  // The elements whose bytes the range touches, converted whole.
  const int64_t first = (lo - s.byte_offset) / es, last = (hi - s.byte_offset + es - 1) / es;
  Tensor f32 = Tensor::empty({last - first}, DType::F32);
  source.values(s, first, f32);
  const Tensor stored = s.dtype == DType::F32 ? f32 : f32.to(s.dtype);
  copy_overlap(stored.data_ptr(), s.byte_offset + first * es, (last - first) * es, out, begin);
}

Nf4Tensors host_pieces(int64_t n) {
  return Nf4Tensors{Tensor::zeros({nf4_packed_bytes(n)}, DType::U8), Tensor::zeros({nf4_blocks(n)}, DType::U8),
                    Tensor::zeros({nf4_nested_blocks(n)}, DType::F32), Tensor::zeros({256}, DType::F32),
                    Tensor::zeros({1}, DType::F32),                     Tensor::zeros({16}, DType::F32), Tensor()};
}

// The whole weight's pieces, as the source stores them or quantized from its values.
Nf4Tensors whole_pieces(const FrozenSlot& s, FrozenSource& source) {
  const Nf4Tensors p = host_pieces(s.numel);
  if (!source.nf4_pieces(s, p)) {
    Tensor w = Tensor::empty({s.numel}, DType::F32);
    source.values(s, 0, w);
    nf4_quantize(w, p, s.name.c_str());
  }
  return p;
}

// A tensor-parallel slice of a weight quantized whole (fsdp/ops/nf4.h, "A slice"): each of
// its blocks is 64 elements contiguous in the whole weight (lora_units checks the split is
// block-aligned), whose packed bytes it copies and whose absmax' it stores as a float.
void fill_nf4_slice(const FrozenSlot& s, const Tensor& out, int64_t begin, FrozenSource& source) {
  FrozenSlot whole = s;
  whole.shape = s.whole_shape();
  whole.numel = whole.shape.numel();
  whole.tp = {};
  whole.nf4.sliced = false;
  const Nf4Tensors w = whole_pieces(whole, source);
  const Tensor absmax = Tensor::empty({nf4_blocks(whole.numel)}, DType::F32);
  nf4_block_absmax(w, absmax);
  const int64_t blocks = nf4_blocks(s.numel), half = kNf4BlockSize / 2;
  const Tensor packed = Tensor::empty({nf4_packed_bytes(s.numel)}, DType::U8);
  const Tensor block_absmax = Tensor::empty({blocks}, DType::F32);
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t J = s.whole_index(j * kNf4BlockSize) / kNf4BlockSize;
    std::memcpy(packed.data<uint8_t>() + j * half, w.packed.data<uint8_t>() + J * half, size_t(half));
    block_absmax.data<float>()[j] = absmax.data<float>()[J];
  }
  const int64_t at = s.byte_offset;
  for (const auto& [piece, offset] : {std::pair{&packed, s.nf4.packed}, {&block_absmax, s.nf4.block_absmax},
                                      {&w.code, s.nf4.code}})
    copy_overlap(piece->data_ptr(), at + offset, int64_t(piece->nbytes()), out, begin);
}

void fill_nf4(const FrozenSlot& s, const Tensor& out, int64_t begin, FrozenSource& source) {
  if (begin >= s.byte_offset + s.bytes || begin + out.numel() <= s.byte_offset) return;
  if (s.nf4.sliced) return fill_nf4_slice(s, out, begin, source);
  const Nf4Tensors p = whole_pieces(s, source);
  const int64_t at = s.byte_offset;
  for (const auto& [piece, offset] : {std::pair{&p.packed, s.nf4.packed}, {&p.absmax, s.nf4.absmax},
                                      {&p.nested_absmax, s.nf4.nested_absmax}, {&p.offset, s.nf4.offset},
                                      {&p.nested_code, s.nf4.nested_code}, {&p.code, s.nf4.code}})
    copy_overlap(piece->data_ptr(), at + offset, int64_t(piece->nbytes()), out, begin);
}

}  // namespace

void fill_frozen_bytes(const UnitLayout& unit, const Tensor& out, int64_t begin, FrozenSource& source) {
  check_dtype(out, DType::U8, "out");
  check_contiguous(out, "out");
  FSDP_CHECK(out.device().is_cpu(), "fill_frozen_bytes: {} must be a host tensor", out.str());
  out.fill_(0.0);
  for (const FrozenSlot& s : unit.frozen) {
    if (s.format == FrozenFormat::Dense) {
      fill_dense(s, out, begin, source);
    } else {
      fill_nf4(s, out, begin, source);
    }
  }
}

Nf4Tensors nf4_pieces_of(const Tensor& frozen, const FrozenSlot& s) {
  const int64_t at = s.byte_offset, n = s.numel;
  if (s.nf4.sliced) {
    Nf4Tensors w;
    w.packed = frozen.reinterpret(DType::U8, at + s.nf4.packed, {nf4_packed_bytes(n)});
    w.block_absmax = frozen.reinterpret(DType::F32, at + s.nf4.block_absmax, {nf4_blocks(n)});
    w.code = frozen.reinterpret(DType::F32, at + s.nf4.code, {16});
    return w;
  }
  return Nf4Tensors{frozen.reinterpret(DType::U8, at + s.nf4.packed, {nf4_packed_bytes(n)}),
                    frozen.reinterpret(DType::U8, at + s.nf4.absmax, {nf4_blocks(n)}),
                    frozen.reinterpret(DType::F32, at + s.nf4.nested_absmax, {nf4_nested_blocks(n)}),
                    frozen.reinterpret(DType::F32, at + s.nf4.nested_code, {256}),
                    frozen.reinterpret(DType::F32, at + s.nf4.offset, {1}),
                    frozen.reinterpret(DType::F32, at + s.nf4.code, {16}), Tensor()};
}

void frozen_slot_values(const Tensor& frozen, const FrozenSlot& s, const Tensor& out) {
  check_dtype(out, DType::F32, "out");
  FSDP_CHECK(out.numel() == s.numel && out.is_contiguous(), "frozen_slot_values: {} for {} ({} elements)", out.str(),
             s.name, s.numel);
  if (s.format == FrozenFormat::Nf4) {
    nf4_dequantize(nf4_pieces_of(frozen, s), s.dtype, out.reshape({s.numel}));
    return;
  }
  out.reshape({s.numel}).copy_(frozen.reinterpret(s.dtype, s.byte_offset, {s.numel}));
}

}  // namespace fsdp::model
