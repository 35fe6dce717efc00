// Text from one rank to all; see broadcast_text.h.
#include "fsdp/dist/broadcast_text.h"

#include <cstring>

namespace fsdp::dist {

std::string broadcast_text(Communicator& group, const std::string& text, int root) {
  if (group.size() == 1) return text;
  Tensor length = Tensor::zeros({1}, DType::F64);
  length.data<double>()[0] = double(text.size());
  group.wait(group.broadcast(length, root));
  const size_t n = size_t(length.data<double>()[0]);
  Tensor bytes = Tensor::zeros({int64_t(n + 7) / 8 + 1}, DType::F64);
  if (group.rank() == root) std::memcpy(bytes.data_ptr(), text.data(), n);
  group.wait(group.broadcast(bytes, root));
  return std::string(static_cast<const char*>(bytes.data_ptr()), n);
}

}  // namespace fsdp::dist
