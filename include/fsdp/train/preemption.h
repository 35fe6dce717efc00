// Preemption signals. Slurm warns a job before its time limit or a preemption with a
// signal (`--signal=USR1@120`, scancel --signal, or SIGTERM at the limit); the trainer
// finishes the step it is in, writes a checkpoint and exits with kExitPreempted so the
// batch script can requeue. Ctrl-C (SIGINT) and a closed terminal or ssh session (SIGHUP)
// are taken the same way: an interrupted run keeps its work. A second signal means "now":
// the process exits at once with 128 + the signal number, as a shell reports a death by
// signal.
#pragma once

namespace fsdp::train {

// Installs the SIGTERM, SIGUSR1, SIGINT and SIGHUP handlers (idempotent; SIGINT and SIGHUP
// only where they are not ignored already, so nohup and background jobs keep their
// meaning). Also ignores SIGXFSZ, so a file size limit surfaces as a write error (EFBIG)
// naming the file instead of killing the run.
void install_preemption_handlers();

// The first preemption signal received (SIGTERM, SIGUSR1, SIGINT or SIGHUP), 0 if none.
int preemption_signal();

// Forgets a received signal (tests).
void reset_preemption_signal();

}  // namespace fsdp::train
