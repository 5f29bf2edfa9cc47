// Removal of registered temporaries when a signal ends the process (see signal_cleanup.h).
#include "io/signal_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/signal_stack.h"

namespace ftune::io {
namespace {

constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;

enum SlotState : int { kFree = 0, kClaimed = 1, kFile = 2, kDir = 3 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[kPathMax];
};

Slot g_slots[kSlots];

// The entries of the directory `dir` (plain files: what ftune writes into a temporary directory)
// unlinked with raw system calls, then the directory itself.
void remove_flat_dir(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof(buf));
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
        unsigned short reclen;
        std::memcpy(&reclen, buf + off + 16, sizeof(reclen));
        const char* name = buf + off + 19;
        if (!(name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))))
          ::unlinkat(fd, name, 0);
        off += reclen;
      }
    }
    ::close(fd);
  }
  ::rmdir(dir);
}

void on_signal(int sig) {
  const int saved_errno = errno;
  for (Slot& s : g_slots) {
    const int st = s.state.load(std::memory_order_acquire);
    if (st == kFile) ::unlink(s.path);
    if (st == kDir) remove_flat_dir(s.path);
  }
  errno = saved_errno;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

SignalTemporary::SignalTemporary(const std::string& path, bool is_dir) {
  if (path.size() >= kPathMax) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kClaimed)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(is_dir ? kDir : kFile, std::memory_order_release);
    slot_ = i;
    return;
  }
}

SignalTemporary& SignalTemporary::operator=(SignalTemporary&& o) noexcept {
  if (this != &o) {
    release();
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

void SignalTemporary::release() noexcept {
  if (slot_ < 0) return;
  g_slots[slot_].state.store(kFree, std::memory_order_release);
  slot_ = -1;
}

void remove_temporaries_on_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      install_signal_handler(sig, on_signal);
    }
  });
}

}  // namespace ftune::io
