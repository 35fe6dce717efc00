// Exit codes of fsdp_train that scripts (slurm/train.sbatch) rely on.
#pragma once

namespace fsdp::train {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // a run that failed after starting (bad data, NaN loss, failed save)
inline constexpr int kExitUsage = 2;  // bad command line or config: nothing was done
// Stopped by SIGTERM / SIGUSR1 after writing a checkpoint: requeue the job and it resumes
// from there. 75 is EX_TEMPFAIL of sysexits.h ("temporary failure, try again").
inline constexpr int kExitPreempted = 75;

}  // namespace fsdp::train
