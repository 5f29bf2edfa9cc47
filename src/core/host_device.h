// Marks functions that compile for both the CPU and CUDA (nvcc sees __host__ __device__, g++ sees
// nothing), so numerics shared by both backends — Philox, bf16/f16 conversion — have one source.
#pragma once

#if defined(__CUDACC__)
#define FTUNE_HD __host__ __device__ __forceinline__
#else
#define FTUNE_HD inline
#endif
