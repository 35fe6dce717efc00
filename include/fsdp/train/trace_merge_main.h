// `fsdp_train trace-merge DIR [--output FILE]`: the per-rank traces a run wrote
// (DIR/rank_<r>.trace.json, fsdp/train/profiler.h) as one Chrome trace with a process per
// rank, on the time axis the ranks already share (their recordings start after one
// barrier), so Perfetto shows every rank's host thread, streams and collectives together.
#pragma once

#include <string>
#include <vector>

namespace fsdp::train {

// argv[0] is "trace-merge". Returns 0 on success, 2 for a usage error, 1 when the merge
// failed (no rank files, a file that is not a trace, files of different recordings).
int trace_merge_main(int argc, char** argv);

// The merge itself: reads the rank files in `dir` and writes `output` (tmp + rename).
// Throws fsdp::Error naming the file at fault.
struct MergedTraces {
  std::vector<int> ranks;  // merged, in order
  int world_size = 0;      // as the files record it
};
MergedTraces merge_traces(const std::string& dir, const std::string& output);

const char* trace_merge_help();

}  // namespace fsdp::train
