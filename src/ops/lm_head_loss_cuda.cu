// The chunked causal-LM loss on CUDA (ops/lm_head_loss.h); mirrors ops/lm_head_loss_cpu.cc block
// for block. Each block of logits is one cuBLASLt GEMM (cuda/gemm.h: fp32, or 16-bit operands with
// h's token chunk and an fp32 head's vocabulary block cast to them, fp32 accumulation and fp32
// logits) into the workspace;
// small kernels do the rest, and nothing waits for the host, so a training step with this loss
// can be captured into a CUDA graph:
//   count    one block: the tokens counted (labels >= 0) and a flag for labels outside the
//            vocabulary, kept in the workspace (the loss and the gradient divide by the count on
//            the device; lm_head_loss_counted reads it back only when asked);
//   rows     forward, one thread block per token of the chunk: soft-caps the block's logits in
//            place, its maximum (block_max), the sum of exp(z - max) (fp32 per thread, added in
//            double across the block: cuda/reduce.cuh's fixed order), folded into the token's
//            running maximum and double sum (the online log-sum-exp), and the label's logit
//            when the label falls in the block;
//   finish   one block per token chunk: lse = max + log(sum) per token, and the chunk's counted
//            terms (lse - target) added to the double total by one thread in token order (the
//            CPU's order); after the last chunk the loss = total / N (NaN for a label outside
//            the vocabulary, where the CPU stops with an error: the GPU cannot without a sync);
//   grad     backward, one thread block per token: the block again, turned in place into
//            g = (softmax - onehot) * dloss / N (times the soft-cap's derivative; 0 on rows not
//            counted), written in fp32, or in the 16-bit operand type into its own buffer; then
//            dh += g W_block and, when the head trains, dW_block += g^T h (fp32 accumulation).
// Memory: the workspace alone (lm_head_loss_layout): one block of logits, the per-token state of
// one chunk and, with 16-bit operands, the chunk of h, the gradient block and (an fp32 head) the
// vocabulary block in 16 bits.
#include <algorithm>
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/gemm.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "ops/cast.h"
#include "ops/lm_head_loss.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 256;

// The per-chunk state and the scalars, in the workspace (lm_head_loss_layout).
struct State {
  double* run_sum;  // rows; reused by finish for each token's counted term
  double* total;    // the summed counted terms so far
  float* run_max;   // rows
  float* target;    // rows: the label's logit (NaN until found)
  int32_t* count;   // tokens counted
  int32_t* bad;     // labels >= V
};

State state_of(float* workspace, const LmHeadLossLayout& L) {
  float* s = workspace + L.state;
  State st;
  st.run_sum = reinterpret_cast<double*>(s);
  st.total = st.run_sum + L.rows;
  st.run_max = s + 2 * L.rows + 2;
  st.target = st.run_max + L.rows;
  st.count = reinterpret_cast<int32_t*>(workspace + L.count);
  st.bad = st.count + 1;
  return st;
}

__device__ __forceinline__ float soft_cap(float x, float cap) {
  return cap > 0 ? cap * tanhf(x / cap) : x;
}

__global__ void __launch_bounds__(kThreads)
    count_kernel(const int32_t* labels, int64_t T, int64_t V, State st) {
  __shared__ int shared[32];
  int n = 0, bad = 0;
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
    const int32_t y = labels[t];
    n += y >= 0 ? 1 : 0;
    bad += y >= V ? 1 : 0;
  }
  n = block_sum(n, shared);
  bad = block_sum(bad, shared);
  if (threadIdx.x != 0) return;
  *st.count = n;
  *st.bad = bad;
  *st.total = 0.0;
}

// Token r of the chunk (blockIdx.x) against vocabulary columns [v0, v0 + cols).
__global__ void __launch_bounds__(kThreads)
    forward_rows_kernel(float* block, int64_t cols, int64_t v0, const int32_t* labels, float cap,
                        bool first, State st) {
  __shared__ float shared_max[32];
  __shared__ double shared_sum[32];
  const int64_t r = blockIdx.x;
  float* z = block + r * cols;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float x = z[c];
    if (cap > 0) {
      x = soft_cap(x, cap);
      z[c] = x;
    }
    mx = fmaxf(mx, x);
  }
  mx = block_max(mx, shared_max);  // its __syncthreads also publishes the capped logits
  const float old_max = first ? -INFINITY : st.run_max[r];
  const float m = fmaxf(old_max, mx);
  float part = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) part += expf(z[c] - m);
  const double sum = block_sum(static_cast<double>(part), shared_sum);
  if (threadIdx.x != 0) return;
  const double old_sum = first ? 0.0 : st.run_sum[r];
  st.run_sum[r] = old_sum * exp(static_cast<double>(old_max) - m) + sum;
  st.run_max[r] = m;
  if (first) st.target[r] = NAN;
  const int32_t y = labels[r];
  if (y >= v0 && y < v0 + cols) st.target[r] = z[y - v0];
}

__global__ void __launch_bounds__(kThreads)
    finish_chunk_kernel(float* lse, const int32_t* labels, int64_t rows, State st, bool last,
                        float* loss, double normalizer) {
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const double l = st.run_max[r] + log(st.run_sum[r]);
    lse[r] = static_cast<float>(l);
    st.run_sum[r] = labels[r] >= 0 ? l - st.target[r] : 0.0;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = *st.total;
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] >= 0) total += st.run_sum[r];
  *st.total = total;
  if (!last) return;
  const double N = normalizer > 0 ? normalizer : static_cast<double>(*st.count);
  *loss = *st.bad ? NAN : static_cast<float>(total / N);  // 0 / 0: NaN, as the CPU
}

template <typename G>
__global__ void __launch_bounds__(kThreads)
    grad_kernel(const float* block, G* g, int64_t cols, int64_t v0, const int32_t* labels,
                const float* lse, float cap, float dloss, const float* dloss_at, double normalizer,
                State st) {
  const int64_t r = blockIdx.x;
  const float* x = block + r * cols;
  G* out = g + r * cols;  // may be x itself (an fp32 head): each element is read, then written
  const int32_t y = labels[r];
  if (y < 0) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store_f32(out + c, 0.0f);
    return;
  }
  const float d = dloss_at ? dloss * *dloss_at : dloss;
  const double N = normalizer > 0 ? normalizer : static_cast<double>(*st.count);
  const float scale = static_cast<float>(d / N);
  const float l = lse[r];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float z = soft_cap(x[c], cap);
    float gz = expf(z - l) * scale;
    if (y == v0 + c) gz -= scale;
    store_f32(out + c, cap > 0 ? gz * (1.0f - (z / cap) * (z / cap)) : gz);
  }
}

// W[v0 : v0 + cols] in the GEMMs' operand type: the head's own rows, or an fp32 head's cast into
// the workspace (16-bit operands).
const void* head_rows(const void* W, int64_t v0, int64_t cols, const LmHeadLossShape& s,
                      float* workspace, const LmHeadLossLayout& L) {
  const void* w = static_cast<const char*>(W) + v0 * s.hidden * static_cast<int64_t>(dtype_size(s.head));
  const DType op = lm_head_loss_operand(s);
  if (op == s.head) return w;
  cast(workspace + L.w16, op, w, s.head, cols * s.hidden);
  return workspace + L.w16;
}

// h[t0 : t0 + rows] in the GEMMs' operand type: itself (f32), or cast into the workspace.
const void* hidden_rows(const float* h, int64_t t0, int64_t rows, const LmHeadLossShape& s,
                        float* workspace, const LmHeadLossLayout& L) {
  const float* x = h + t0 * s.hidden;
  const DType op = lm_head_loss_operand(s);
  if (op == DType::F32) return x;
  cast(workspace + L.h16, op, x, DType::F32, rows * s.hidden);
  return workspace + L.h16;
}

// workspace (rows, cols) = hc (rows, H) @ Wc (cols, H)^T, fp32 out.
void logits_block(float* workspace, const void* hc, const void* Wc, int64_t rows, int64_t cols,
                  const LmHeadLossShape& s) {
  const DType op = lm_head_loss_operand(s);
  GemmArgs g;
  g.trans_b = true;
  g.M = rows;
  g.N = cols;
  g.K = s.hidden;
  g.A = hc;
  g.a_type = op;
  g.lda = s.hidden;
  g.B = Wc;
  g.b_type = op;
  g.ldb = s.hidden;
  g.C = workspace;
  g.c_type = DType::F32;
  g.ldc = cols;
  gemm(g);
}

void count_tokens(const int32_t* labels, const LmHeadLossShape& s, const State& st) {
  count_kernel<<<1, kThreads, 0, compute_stream()>>>(labels, s.tokens, s.vocab, st);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void lm_head_loss_forward(float* loss, float* lse, const float* h, const void* W,
                          const int32_t* labels, double normalizer, const LmHeadLossShape& s,
                          float* workspace) {
  const LmHeadLossLayout L = lm_head_loss_layout(s);
  const State st = state_of(workspace, L);
  const int64_t T = s.tokens, V = s.vocab;
  const cudaStream_t stream = compute_stream();
  count_tokens(labels, s, st);
  if (T == 0) {  // nothing counted: the loss is NaN, as the CPU's
    finish_chunk_kernel<<<1, kThreads, 0, stream>>>(lse, labels, 0, st, true, loss, normalizer);
    FTUNE_CUDA_CHECK_LAUNCH();
    return;
  }
  for (int64_t t0 = 0; t0 < T; t0 += s.token_chunk) {
    const int64_t rows = std::min(s.token_chunk, T - t0);
    const void* hc = hidden_rows(h, t0, rows, s, workspace, L);
    for (int64_t v0 = 0; v0 < V; v0 += s.vocab_chunk) {
      const int64_t cols = std::min(s.vocab_chunk, V - v0);
      logits_block(workspace, hc, head_rows(W, v0, cols, s, workspace, L), rows, cols, s);
      forward_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          workspace, cols, v0, labels + t0, s.softcap, v0 == 0, st);
      FTUNE_CUDA_CHECK_LAUNCH();
    }
    finish_chunk_kernel<<<1, kThreads, 0, stream>>>(lse + t0, labels + t0, rows, st,
                                                    t0 + rows >= T, loss, normalizer);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

void lm_head_loss_backward(float* dh, float* dW, const float* lse, const float* h, const void* W,
                           const int32_t* labels, double normalizer, float dloss,
                           const float* dloss_at, const LmHeadLossShape& s, float* workspace) {
  const LmHeadLossLayout L = lm_head_loss_layout(s);
  const State st = state_of(workspace, L);
  const int64_t T = s.tokens, H = s.hidden, V = s.vocab;
  const cudaStream_t stream = compute_stream();
  count_tokens(labels, s, st);  // the forward's count, again: the backward needs no forward state
  // The gradient block: in place (fp32 operands) or the 16-bit buffer the GEMMs read.
  const DType op = lm_head_loss_operand(s);
  void* g = op == DType::F32 ? static_cast<void*>(workspace)
                             : static_cast<void*>(workspace + L.g16);
  for (int64_t t0 = 0; t0 < T; t0 += s.token_chunk) {
    const int64_t rows = std::min(s.token_chunk, T - t0);
    const void* hc = hidden_rows(h, t0, rows, s, workspace, L);
    for (int64_t v0 = 0; v0 < V; v0 += s.vocab_chunk) {
      const int64_t cols = std::min(s.vocab_chunk, V - v0);
      const void* Wc = head_rows(W, v0, cols, s, workspace, L);
      logits_block(workspace, hc, Wc, rows, cols, s);
      with_float_type(op, g, [&](auto* typed) {
        grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            workspace, typed, cols, v0, labels + t0, lse + t0, s.softcap, dloss, dloss_at,
            normalizer, st);
        FTUNE_CUDA_CHECK_LAUNCH();
      });
      // dh[t0 : t0 + rows] += g (rows, cols) @ W[v0 : v0 + cols] (cols, H)
      GemmArgs dx;
      dx.M = rows;
      dx.N = H;
      dx.K = cols;
      dx.A = g;
      dx.a_type = op;
      dx.lda = cols;
      dx.B = Wc;
      dx.b_type = op;
      dx.ldb = H;
      dx.beta = 1.0f;
      dx.C = dh + t0 * H;
      dx.c_type = DType::F32;
      dx.ldc = H;
      gemm(dx);
      if (!dW) continue;
      // dW[v0 : v0 + cols] += g^T (cols, rows) @ h[t0 : t0 + rows] (rows, H); an fp32 head
      GemmArgs dw;
      dw.trans_a = true;
      dw.M = cols;
      dw.N = H;
      dw.K = rows;
      dw.A = g;
      dw.a_type = op;
      dw.lda = cols;
      dw.B = hc;
      dw.b_type = op;
      dw.ldb = H;
      dw.beta = 1.0f;
      dw.C = dW + v0 * H;
      dw.c_type = DType::F32;
      dw.ldc = H;
      gemm(dw);
    }
  }
}

}  // namespace ftune::cuda
