// Alternate signal stacks per thread and SA_ONSTACK handlers (see signal_stack.h).
#include "core/signal_stack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>

namespace ftune {
namespace {

// 64 KiB: the handlers only store flags and make a few system calls, and the largest signal frame
// (AVX-512 state, about 3 KiB) fits many times over; more where the kernel asks for more.
size_t stack_bytes() {
  size_t bytes = 64 * 1024;
#ifdef _SC_MINSIGSTKSZ
  const long min = sysconf(_SC_MINSIGSTKSZ);
  if (min > 0) bytes = std::max(bytes, static_cast<size_t>(min) * 4);
#endif
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// The calling thread's own alternate stack: mapped on first use, released at thread exit (the
// kernel's record of it disabled first, if it is still this one).
class ThreadSignalStack {
 public:
  void ensure() {
    if (base_ != nullptr || foreign_) return;
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) {
      foreign_ = true;
      return;
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = stack_bytes();
    void* map =
        mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return;   // no memory for it: handlers run on the thread's stack
    mprotect(map, page, PROT_NONE);  // an overflow faults instead of writing below the stack
    stack_t ss{};
    ss.ss_sp = static_cast<char*>(map) + page;
    ss.ss_size = bytes;
    if (sigaltstack(&ss, nullptr) != 0) {
      munmap(map, bytes + page);
      return;
    }
    base_ = map;
    mapped_ = bytes + page;
    stack_ = ss.ss_sp;
  }

  ~ThreadSignalStack() {
    if (base_ == nullptr) return;
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && current.ss_sp == stack_ &&
        !(current.ss_flags & SS_DISABLE)) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      if (sigaltstack(&off, nullptr) != 0) return;  // still in use: leave it mapped
    }
    munmap(base_, mapped_);
  }

 private:
  void* base_ = nullptr;
  void* stack_ = nullptr;
  size_t mapped_ = 0;
  bool foreign_ = false;  // the thread already had an alternate stack, not ours
};

thread_local ThreadSignalStack t_stack;

}  // namespace

void use_alternate_signal_stack() {
  t_stack.ensure();
}

void install_signal_handler(int sig, void (*handler)(int), int flags, struct sigaction* old) {
  use_alternate_signal_stack();
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = flags | SA_ONSTACK;
  sigaction(sig, &sa, old);
}

}  // namespace ftune
