// Exit codes of fsdp_train that scripts (slurm/train.sbatch) rely on.
#pragma once

namespace fsdp::train {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // a run that failed after starting (bad data, NaN loss, failed save)
inline constexpr int kExitUsage = 2;  // bad command line or config: nothing was done
// Stopped by SIGTERM / SIGUSR1 after writing a checkpoint: requeue the job and it resumes
// from there. 75 is EX_TEMPFAIL of sysexits.h ("temporary failure, try again").
inline constexpr int kExitPreempted = 75;
// The collective watchdog aborted the job (dist/watchdog.h): a rank died, stopped or hung,
// and the survivors gave up after dist.timeout_s. Requeue the job and it resumes from its
// last periodic checkpoint (not from this step: no checkpoint was written). Apart from 75
// because the two differ for a script: 75 lost nothing, 76 loses the steps since the last
// checkpoint and may recur on a broken node. 76 is EX_PROTOCOL of sysexits.h ("remote error
// in protocol": a peer failed its side of a collective).
inline constexpr int kExitPeerFailure = 76;

}  // namespace fsdp::train
