// OpenBLAS's kernel choice on CPUs it does not know. A DYNAMIC_ARCH OpenBLAS picks its kernel
// table by CPU family and model; on a model newer than the library (Debian 12's 0.3.21 on Intel
// Emerald Rapids, model 207) it falls back to "Prescott", SSE3 kernels 5-10x slower than the
// AVX-512 ones the CPU runs. The `ftune` program re-executes itself with OPENBLAS_CORETYPE set to
// the table the CPU's instruction set supports (core/blas_buffers.h) when OpenBLAS chose a
// table without AVX2 on a CPU that has it; a user's own OPENBLAS_CORETYPE is left alone.
#pragma once

#include <string>

namespace ftune {

// The OPENBLAS_CORETYPE to force, or "" to keep OpenBLAS's choice: `chosen` is OpenBLAS's core
// name (openblas_get_corename()); a table without AVX2 is replaced by "SkylakeX" on a CPU with
// AVX-512 (F, BW, DQ, VL), else by "Haswell" on one with AVX2 and FMA.
std::string openblas_core_upgrade(const std::string& chosen, bool avx512, bool avx2_fma);

// openblas_core_upgrade() for the linked OpenBLAS on this CPU.
std::string openblas_core_upgrade_here();

}  // namespace ftune
