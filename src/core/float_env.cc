// Per-thread FTZ/DAZ control through the architecture's control register.
#include "core/float_env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ftune {

void enable_flush_to_zero() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | 0x8040u);  // bit 15: flush-to-zero, bit 6: denormals-are-zero
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  fpcr |= (uint64_t{1} << 24);
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#endif
}

bool flush_to_zero_enabled() {
#if defined(__x86_64__) || defined(__i386__)
  return (_mm_getcsr() & 0x8040u) == 0x8040u;
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return (fpcr >> 24) & 1u;
#else
  return false;
#endif
}

}  // namespace ftune
