#pragma once
// The temp files atomic checkpoint writes go through: <path>.tmp.<host>.<pid>, held under an
// flock by their writer until renamed over <path>. A writer killed mid-write (SIGKILL, the
// OOM killer) leaves one behind, gigabytes on a real model; the next write or load of the
// same checkpoint removes it. The kernel drops the lock however the writer ended, so a free
// lock means a dead writer without trusting pids. Only this host's files are judged (on a
// shared filesystem without lock support, another node's lock would look free).
#include <string>

namespace ddp::worker_runtime {

// <path>.tmp.<host>.<pid>: the temp file this process writes path through.
std::string checkpoint_temp_path(const std::string& path);
// Creates (truncates) the temp file for path and locks it; returns the open fd. Retries when
// a cleaner removed the name between create and lock. Throws CheckpointError naming it.
int open_checkpoint_temp(const std::string& temp_path);
// Removes path's temp files left by writers that are gone: this host's whose lock is free,
// and older <path>.tmp.<pid> files (written before the lock) whose pid no longer exists.
// Best effort (errors are ignored); returns how many were removed.
int remove_stale_checkpoint_temps(const std::string& path);

}  // namespace ddp::worker_runtime
