//===- Signals.h - SIGINT and SIGTERM: stop, save, exit ---------*- C++ -*-===//
//
// Ctrl-C sends SIGINT; Slurm, Kubernetes and Open MPI's mpirun (which turns
// its own SIGINT or SIGTERM into a SIGTERM for every rank) send SIGTERM
// before they kill. Both mean "stop now, keep what can be kept". What that
// takes depends on the phase the process is in:
//
//   Immediate  before training (compiling, loading data, setting up): there
//              is nothing to save, so the handler prints one line and the
//              process exits at once with 128 + the signal (130, 143).
//   Deferred   in the training loop: the handler only records the signal;
//              the loop polls stopSignal() between steps and between
//              validation batches, the ranks agree, rank 0 saves a
//              checkpoint, and the process exits with 128 + the signal. A
//              second signal in this phase, a second or more after the
//              first, exits at once without saving.
//   Saving     while a checkpoint is written: signals are only recorded, so
//              that a second Ctrl-C cannot leave a half-written folder.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_SIGNALS_H
#define KILN_RUNTIME_TRAIN_SIGNALS_H

#include <string>

namespace kiln::runtime {

enum class StopPhase { Immediate, Deferred, Saving };

/// Installs the handlers of SIGINT and SIGTERM, in the Immediate phase.
/// Call it first thing in a tool that trains; again is harmless. Under an
/// MPI launcher only rank 0 prints the Immediate phase's line (every rank
/// receives the signal).
void installStopHandlers();

/// Switches the phase; returns the previous one.
StopPhase setStopPhase(StopPhase phase);

/// The first SIGINT or SIGTERM received since the handlers were installed
/// (or since clearStopSignal), else 0.
int stopSignal();
void clearStopSignal();

/// "SIGINT", "SIGTERM", or "a signal".
const char *signalName(int signal);

/// Open MPI's mpirun sends the ranks SIGKILL odls_base_sigkill_timeout
/// seconds (default 1) after its SIGTERM. When the stop signal came from
/// mpirun and that leaves less than `seconds` to save, a line saying how to
/// give the ranks longer; else empty.
std::string launcherGraceNote(int seconds);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_SIGNALS_H
