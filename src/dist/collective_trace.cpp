// How a collective shows in a trace (fsdp/core/trace.h), the same for the MPI and NCCL
// backends: named by the collective ("all_gather"), in category "collective", with the
// byte count the communicator's stats() adds, so a trace's collectives in a step sum to
// the step's comm_bytes.
#include "detail.h"
#include "fsdp/core/trace.h"

namespace fsdp::dist::detail {

std::string collective_trace_args(const Communicator& c, Collective op, const Tensor& t, uint64_t bytes_sent,
                                  int root) {
  if (op == Collective::Broadcast) {
    return trace::args({{"group", c.name()}, {"ranks", c.size()}, {"bytes", bytes_sent}, {"elements", t.numel()},
                        {"dtype", dtype_name(t.dtype())}, {"root", root}});
  }
  return trace::args({{"group", c.name()}, {"ranks", c.size()}, {"bytes", bytes_sent}, {"elements", t.numel()},
                      {"dtype", dtype_name(t.dtype())}});
}

}  // namespace fsdp::dist::detail
