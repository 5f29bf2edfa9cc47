// The small kernels of cuDNN attention (see cudnn_attention.h): ftune's key mask or packed rows'
// cumulative lengths into cuDNN's sequence lengths and ragged offsets, and the dropout key into
// cuDNN's seed and offset. The cudnn_frontend graphs are host code, in cudnn_attention.cc (compiled
// once by the host compiler, not once per GPU architecture).
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/cuda_device.h"
#include "cuda/cudnn_attention.h"
#include "cuda/streams.cuh"

namespace ftune::cuda {
namespace {

__global__ void seq_lens_kernel(int32_t* seq_lens, const int32_t* key_mask, int64_t B, int64_t T) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= B) return;
  int64_t last = -1;
  for (int64_t t = 0; t < T; ++t)
    if (key_mask[b * T + t] != 0) last = t;
  seq_lens[b] = static_cast<int32_t>(T);
  seq_lens[B + b] = static_cast<int32_t>(last >= 0 ? last + 1 : T);
}

__global__ void ragged_kernel(int32_t* seq_lens, int64_t* ragged, const int32_t* cu, int64_t B,
                              int64_t C) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b > B) return;
  const SdpaRaggedEntry e = sdpa_ragged_entry(cu, B, C, b);
  if (b < B) seq_lens[b] = seq_lens[B + b] = e.seq_len;
  ragged[b] = e.qkv_offset;
  ragged[B + 1 + b] = e.out_offset;
}

__device__ uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void write_rng_kernel(int64_t* rng, RngKey key, uint64_t row0) {
  resolve_micro(key, row0);
  const uint64_t seed = mix(key.seed ^ mix(0x9e3779b97f4a7c15ull * (uint64_t{key.site} + 1)) ^
                            mix(row0 + 0x632be59bd9b4e019ull));
  rng[0] = static_cast<int64_t>(seed >> 1);
  rng[1] = static_cast<int64_t>(uint64_t{key.offset} << 32);
}

}  // namespace

void sdpa_seq_lens_from_mask(int32_t* seq_lens, const int32_t* key_mask, int64_t B, int64_t T) {
  if (B == 0) return;
  seq_lens_kernel<<<grid_for(B, 128), 128, 0, compute_stream()>>>(seq_lens, key_mask, B, T);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void sdpa_ragged_from_cu(int32_t* seq_lens, int64_t* ragged, const int32_t* cu, int64_t B,
                         int64_t C) {
  ragged_kernel<<<grid_for(B + 1, 128), 128, 0, compute_stream()>>>(seq_lens, ragged, cu, B, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void sdpa_write_rng(int64_t* rng, RngKey key, uint64_t row0) {
  write_rng_kernel<<<1, 1, 0, compute_stream()>>>(rng, key, row0);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
