// Signals landing inside the CPU GEMM (core/signal_stack.h): oneDNN's generated sgemm kernels
// point the stack pointer into the heap while they run, so a handler run on the interrupted stack
// corrupted the heap (a Ctrl-C during training aborted in free()). Here another thread sends the
// GEMM's threads, and the process, signals until a thousand were handled, through a handler
// installed as ftune installs its own, while training's products run on one and on two threads:
// every handler on those threads must run on an alternate stack (the calling thread's from
// install_signal_handler, the compute workers' own), every product must stay bit-identical to the
// one made without signals, and the heap must stay whole (glibc aborts on a corrupted chunk when
// the scratch is freed). Without SA_ONSTACK this aborted in 3 of 3 runs (oneDNN, 1 thread).
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/signal_stack.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"
#include "ops/primitives_cpu.h"
#include "test_util.h"

namespace ftune::test {
namespace {

// The threads that make products (each registers itself inside the parallel region), and how
// many signals they handled on an alternate stack and how many on the stack they were
// interrupted on.
constexpr int kMaxThreads = 4;
std::atomic<pid_t> g_gemm_tids[kMaxThreads];
std::atomic<long> g_on_alternate{0}, g_on_interrupted_stack{0};

// Async-signal-safe: gettid, sigaltstack and atomics.
void count_signal(int) {
  const pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
  for (const auto& tid : g_gemm_tids)
    if (tid.load() == me) {
      stack_t ss{};
      sigaltstack(nullptr, &ss);
      (ss.ss_flags & SS_ONSTACK ? g_on_alternate : g_on_interrupted_stack).fetch_add(1);
      return;
    }
}

// MiniLM's feed-forward at 512 tokens: the forward X @ W^T, the input gradient dY @ W, and the
// weight gradient accumulated as dW += dY^T @ X (oneDNN's panelled path, with scratch).
struct Products {
  static constexpr int64_t T = 512, H = 384, F = 1536;
  std::vector<float> x, w, dy, y, dx, dw;

  explicit Products(std::mt19937_64& rng) : x(T * H), w(F * H), dy(T * F) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto* v : {&x, &w, &dy})
      for (float& e : *v) e = u(rng);
  }

  void run() {
    y.assign(T * F, 0.0f);
    dx.assign(T * H, 0.0f);
    dw.assign(F * H, 0.25f);
    cpu::gemm(false, true, T, F, H, 1.0f, x.data(), H, w.data(), H, 0.0f, y.data(), F);
    cpu::gemm(false, false, T, H, F, 1.0f, dy.data(), F, w.data(), H, 0.0f, dx.data(), H);
    cpu::gemm(true, false, F, H, T, 1.0f, dy.data(), F, x.data(), H, 1.0f, dw.data(), H);
  }
};

std::vector<cpu::GemmLibrary> libraries_here() {
  std::vector<cpu::GemmLibrary> libs = {cpu::GemmLibrary::OpenBlas};
  if (cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OneDnn);
  return libs;
}

// SIGTERM through count_signal, installed as ftune installs its handlers, sent by a thread of its
// own in turn to each of `targets` and to the process (which the kernel gives to a thread without
// one pending), about every 50 microseconds, until stop() or destruction (an assertion that
// returns early): then the last ones are handled and the previous action comes back.
class SignalSender {
 public:
  explicit SignalSender(std::vector<pid_t> targets) : targets_(std::move(targets)) {
    install_signal_handler(SIGTERM, count_signal, 0, &old_);
    thread_ = std::thread([this] {
      while (!done_.load()) {
        const size_t k = static_cast<size_t>(sent_.fetch_add(1)) % (targets_.size() + 1);
        if (k < targets_.size())
          syscall(SYS_tgkill, getpid(), targets_[k], SIGTERM);
        else
          kill(getpid(), SIGTERM);
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    });
  }
  ~SignalSender() { stop(); }
  long sent() const { return sent_.load(); }
  void stop() {
    if (!thread_.joinable()) return;
    done_ = true;
    thread_.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sigaction(SIGTERM, &old_, nullptr);
  }

 private:
  std::vector<pid_t> targets_;
  struct sigaction old_ {};
  std::atomic<bool> done_{false};
  std::atomic<long> sent_{0};
  std::thread thread_;
};

class SignalDuringGemm : public ::testing::Test {
 protected:
  void TearDown() override {
    cpu::set_gemm_library(cpu::parse_gemm_library("auto", "test"));
    set_compute_threads(0);
  }
  std::mt19937_64 rng_{test_seed()};
};

TEST_F(SignalDuringGemm, HandlersRunOnAlternateStacksAndProductsAndHeapSurvive) {
  // Handled signals to wait for, and a bound on those sent (signals of one kind merge while
  // pending: on a loaded machine far fewer are handled than sent).
  constexpr long kHandled = 1000, kMaxSent = 1000000;
  for (const cpu::GemmLibrary lib : libraries_here())
    for (const int threads : {1, 2}) {
      SCOPED_TRACE(std::string(cpu::gemm_library_name(lib)) + ", threads " +
                   std::to_string(threads));
      cpu::set_gemm_library(lib);
      set_compute_threads(threads);
      // Each thread makes the whole set of products on its own, in a parallel region, as
      // training's per-thread GEMMs do; the first round, without signals, is the reference.
      std::vector<Products> got(static_cast<size_t>(threads), Products(rng_));
      const auto run_all = [&] {
        parallel_for(threads, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            g_gemm_tids[t] = static_cast<pid_t>(syscall(SYS_gettid));
            got[static_cast<size_t>(t)].run();
          }
        });
      };
      run_all();
      const Products want = got[0];
      std::vector<pid_t> targets;
      for (int t = 0; t < threads; ++t) targets.push_back(g_gemm_tids[t].load());

      g_on_alternate = 0;
      g_on_interrupted_stack = 0;
      SignalSender sender(targets);
      long rounds = 0;
      const auto handled = [] { return g_on_alternate.load() + g_on_interrupted_stack.load(); };
      while ((handled() < kHandled && sender.sent() < kMaxSent) || rounds < 3) {
        run_all();
        ++rounds;
        for (const Products& g : got) {
          ASSERT_EQ(g.y, want.y) << "round " << rounds;
          ASSERT_EQ(g.dx, want.dx) << "round " << rounds;
          ASSERT_EQ(g.dw, want.dw) << "round " << rounds;
        }
      }
      sender.stop();
      for (auto& tid : g_gemm_tids) tid = 0;
      EXPECT_EQ(g_on_interrupted_stack.load(), 0);
      EXPECT_GE(g_on_alternate.load(), kHandled);
      // A heap whose chunks were overwritten aborts in malloc or free here, at the latest.
      for (int i = 0; i < 200; ++i) std::vector<float> churn(1000 + 997 * i, 1.0f);
    }
}

}  // namespace
}  // namespace ftune::test
