// Temporary files and directories that a terminating signal must not leave behind. A command
// that writes outputs aside (AtomicFileWriter's temporaries, export's directory built next to its
// target) registers each temporary while it exists; remove_temporaries_on_signals() installs
// handlers for SIGTERM, SIGINT and SIGHUP that remove every registered one and then end the
// process by the same signal (its exit status stays "killed by SIGTERM"). The handler uses only
// async-signal-safe system calls (unlinkat, getdents64, rmdir) on paths copied into fixed slots
// at registration, so it is safe whatever the interrupted code was doing. `ftune train` keeps its
// own SIGTERM handling (a checkpoint, then a clean exit) and does not install these handlers.
#pragma once

#include <string>

namespace ftune::io {

// Registers a temporary (a file, or a directory of plain files) and unregisters it when it goes
// away. Registration is best effort: past 64 live temporaries, or a path too long for a slot,
// the temporary is still removed on every ordinary exit path, only not by a signal.
class SignalTemporary {
 public:
  SignalTemporary() = default;
  SignalTemporary(const std::string& path, bool is_dir);
  ~SignalTemporary() { release(); }
  SignalTemporary(SignalTemporary&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  SignalTemporary& operator=(SignalTemporary&& o) noexcept;
  SignalTemporary(const SignalTemporary&) = delete;
  SignalTemporary& operator=(const SignalTemporary&) = delete;
  // Forgets the temporary (it was renamed into place or removed).
  void release() noexcept;

 private:
  int slot_ = -1;
};

// Installs the handlers (once; later calls do nothing). Signals set to be ignored stay ignored.
void remove_temporaries_on_signals();

}  // namespace ftune::io
