// Front end of the embedding op: validates every argument once for all backends, then
// dispatches on the device. Id range checks need the ids' values, which only the backend
// can read (they may live on a GPU), so each backend reports those itself.
#include "fsdp/ops/embedding.h"

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(embedding_forward_stub);
FSDP_DEFINE_DISPATCH(embedding_backward_stub);
FSDP_DEFINE_DISPATCH(embedding_shard_forward_stub);
FSDP_DEFINE_DISPATCH(embedding_shard_backward_stub);

namespace {

void check_ids(const Tensor& ids) {
  check_defined(ids, "ids");
  FSDP_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, "ids must be int32 or int64, got {}",
             ids.str());
  check_dim(ids, 1, "ids");
  check_contiguous(ids, "ids");
}

// rows: [N, C] with the table's dtype, device and width, packed rows.
void check_rows(const Tensor& rows, const Tensor& ids, const Tensor& table, const char* what,
                const char* table_what) {
  check_shape(rows, Dims{ids.size(0), table.size(1)}, what);
  check_same_dtype(rows, table, what, table_what);
  check_rows_packed(rows, what);
}

void check_shard(const Tensor& table, int64_t vocab_begin, int64_t vocab_size) {
  FSDP_CHECK(vocab_begin >= 0 && vocab_begin + table.size(0) <= vocab_size,
             "the table's rows [{}, {}) are not inside the vocabulary [0, {})", vocab_begin,
             vocab_begin + table.size(0), vocab_size);
}

}  // namespace

void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out, int64_t vocab_begin,
                             int64_t vocab_size) {
  check_ids(ids);
  detail::check_float_rows(table, "table");
  check_rows(out, ids, table, "out", "table");
  check_same_device(table, ids, "table", "ids");
  check_same_device(out, ids, "out", "ids");
  check_shard(table, vocab_begin, vocab_size);
  embedding_shard_forward_stub(table.device(), ids, table, out, vocab_begin, vocab_size);
}

void embedding_shard_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t vocab_begin,
                              int64_t vocab_size) {
  check_ids(ids);
  detail::check_float_rows(dtable, "dtable");
  check_rows(dout, ids, dtable, "dout", "dtable");
  check_same_device(dtable, ids, "dtable", "ids");
  check_same_device(dout, ids, "dout", "ids");
  check_shard(dtable, vocab_begin, vocab_size);
  embedding_shard_backward_stub(dtable.device(), ids, dout, dtable, vocab_begin, vocab_size);
}

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  check_ids(ids);
  detail::check_float_rows(table, "table");  // [V, C], packed rows
  check_rows(out, ids, table, "out", "table");
  check_same_device(table, ids, "table", "ids");
  check_same_device(out, ids, "out", "ids");
  embedding_forward_stub(table.device(), ids, table, out);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  check_ids(ids);
  detail::check_float_rows(dtable, "dtable");
  check_rows(dout, ids, dtable, "dout", "dtable");
  check_same_device(dtable, ids, "dtable", "ids");
  check_same_device(dout, ids, "dout", "ids");
  embedding_backward_stub(dtable.device(), ids, dout, dtable);
}

}  // namespace fsdp
