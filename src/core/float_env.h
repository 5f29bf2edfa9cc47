// Floating-point environment of compute threads: flush-to-zero and denormals-are-zero on the CPU,
// so denormal inputs (tiny gradients late in training) never fall onto the slow microcode path.
#pragma once

namespace ftune {

// Sets FTZ/DAZ for the calling thread (x86: MXCSR bits; aarch64: FPCR.FZ). Every compute thread
// calls it when it starts.
void enable_flush_to_zero();

// True if the calling thread flushes denormal results to zero.
bool flush_to_zero_enabled();

}  // namespace ftune
