// The protobuf messages of a TensorBoard event file, encoded by hand: the few fields an
// event file of scalars needs, from tensorboard's compat/proto/event.proto and
// summary.proto (the same messages TensorFlow and torch.utils.tensorboard write):
//
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; }
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; }
//   SessionLog { SessionStatus status = 1; }   START = 1
//
// No protobuf library: this is the whole of what the writer needs (a varint, a double, a
// float and nested length-delimited messages), and a dependency for it would be the only
// one of its kind in the build. tests/golden/tensorboard/ reads the result back with the
// tensorboard package's own reader.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::obs::tf_event {

// The first event of every file: file_version "brain.Event:2" (TensorBoard reads a
// SessionLog START as a restart only in files of version 2 or later).
std::string file_version(double wall_time);
// A restart at `step`: TensorBoard drops the events of earlier files at steps >= step
// (torch's SummaryWriter(purge_step=step) writes the same).
std::string session_start(double wall_time, int64_t step);
// One event with a scalar summary value per (tag, value).
std::string scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values);

}  // namespace fsdp::obs::tf_event
