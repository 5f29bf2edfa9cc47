// OpenBLAS's memory under an address-space limit (ulimit -v). OpenBLAS maps a 128 MiB buffer
// (BUFFER_SIZE, 32 << 22 on x86_64) for each thread that runs a GEMM, and for each of its own
// server threads as they start; when that mmap fails, blas_memory_alloc retries for ever (100 %
// CPU, deaf to SIGTERM), and exit() then waits on the stuck thread. ftune runs OpenBLAS
// single-threaded (its own pool splits the work), so:
//  - the process re-executes itself once with OPENBLAS_NUM_THREADS=1 (unless the user set it)
//    before OpenBLAS can start server threads that nothing uses (and with OPENBLAS_CORETYPE on a
//    CPU newer than OpenBLAS: core/openblas_core.h);
//  - under a finite RLIMIT_AS, the compute pool maps every thread's buffer up front (a GEMM on
//    each thread at once) after checking that the address space has room for them; without room
//    it is an OutOfMemoryError that says so, instead of a hang.
#pragma once

#include <cstdint>

namespace ftune {

class ThreadPool;

// Address space OpenBLAS maps per GEMM-running thread (its buffer and a guard page).
constexpr int64_t kBlasBufferBytes = (int64_t{32} << 22) + 8192;

// Re-executes the running program (/proc/self/exe, same argv) once with OPENBLAS_NUM_THREADS=1
// when that variable is unset, and with OPENBLAS_CORETYPE set when it is unset and OpenBLAS chose
// a table older than the CPU (core/openblas_core.h); returns when there is nothing to set (or
// when the exec fails).
void reexec_with_blas_settings(char** argv);

// Under a finite address-space limit: refuses (OutOfMemoryError) when `pool`'s threads' BLAS
// buffers do not fit, else has every thread map its buffer now. Does nothing without a limit.
void reserve_blas_buffers(ThreadPool& pool);

}  // namespace ftune
