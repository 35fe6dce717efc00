// Merging the per-rank traces a run wrote (DIR/rank_<r>.trace.json, fsdp/obs/profiler.h)
// into one Chrome trace with a process per rank, on the time axis the ranks already share
// (their recordings start after one barrier), so Perfetto shows every rank's host thread,
// streams and collectives together. `fsdp_train trace-merge` is its command line.
#pragma once

#include <string>
#include <vector>

namespace fsdp::obs {

// Reads the rank files in `dir` and writes `output` (tmp + rename). Throws fsdp::Error
// naming the file at fault (no rank files, a file that is not a trace, files of different
// recordings).
struct MergedTraces {
  std::vector<int> ranks;  // merged, in order
  int world_size = 0;      // as the files record it
};
MergedTraces merge_traces(const std::string& dir, const std::string& output);

}  // namespace fsdp::obs
