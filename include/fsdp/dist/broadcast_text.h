// Text from one rank to all: decisions only one rank can make (rank 0 looks at a shared
// directory and decides; every rank must then act on, or fail with, the same words), sent
// through the ordinary tensor broadcast. The bytes travel as the bit patterns of float64
// elements: a broadcast copies and never computes, so every bit arrives intact.
#pragma once

#include <string>

#include "fsdp/dist/communicator.h"

namespace fsdp::dist {

// Collective over `group`: returns `root`'s `text` on every rank (the others' is ignored).
std::string broadcast_text(Communicator& group, const std::string& text, int root = 0);

}  // namespace fsdp::dist
