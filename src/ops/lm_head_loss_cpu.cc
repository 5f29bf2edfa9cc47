// The chunked causal-LM loss on the CPU (ops/lm_head_loss.h): blocks of logits by cpu::gemm,
// the per-token softmax work threaded over the block's rows. 16-bit operands are the CPU's
// emulation of 16-bit storage (ops/cast.h): a 16-bit head's vocabulary block staged to fp32 (an
// fp32 head's rounded to the operand type), the token chunk of h and the gradient block rounded
// to it, fp32 compute.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cast.h"
#include "ops/lm_head_loss.h"
#include "ops/primitives_cpu.h"

namespace ftune {
namespace cpu {
namespace {

void check(const LmHeadLossShape& s) {
  FTUNE_ASSERT(
      s.tokens >= 0 && s.hidden > 0 && s.vocab > 0 && s.token_chunk > 0 && s.vocab_chunk > 0,
      "lm_head_loss: bad shape T={} H={} V={} chunks {}x{}", s.tokens, s.hidden, s.vocab,
      s.token_chunk, s.vocab_chunk);
}

int64_t counted(const int32_t* labels, int64_t T, int64_t V) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t) {
    FTUNE_ASSERT(labels[t] < V,
                 "lm_head_loss: label {} at token {} is outside the vocabulary of {}", labels[t], t,
                 V);
    n += labels[t] >= 0;
  }
  return n;
}

// x rounded to the 16-bit type t (as a GPU stores it), or x itself for f32.
float round_to(DType t, float x) {
  if (t == DType::BF16) return bf16_to_float(float_to_bf16(x));
  if (t == DType::F16) return f16_to_float(float_to_f16(x));
  return x;
}

// n values of x rounded to the operand type t in staging slot `slot`.
const float* rounded(const float* x, int64_t n, DType t, int slot) {
  float* out = staging(slot, n);
  parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = round_to(t, x[i]);
  });
  return out;
}

// h[t0 : t0 + rows] as the GEMMs read it: itself, or rounded to 16-bit operands (slot 0).
const float* hidden_rows(const float* h, int64_t t0, int64_t rows, const LmHeadLossShape& s) {
  const float* x = h + t0 * s.hidden;
  const DType op = lm_head_loss_operand(s);
  return op == DType::F32 ? x : rounded(x, rows * s.hidden, op, 0);
}

// W[v0 : v0 + cols] in fp32 as the GEMMs read it: itself, a 16-bit head's rows widened, or an
// fp32 head's rounded to 16-bit operands (slot 1).
const float* head_rows(const void* W, int64_t v0, int64_t cols, const LmHeadLossShape& s) {
  const char* w = static_cast<const char*>(W) + v0 * s.hidden * static_cast<int64_t>(dtype_size(s.head));
  const DType op = lm_head_loss_operand(s);
  if (s.head == DType::F32 && op != DType::F32)
    return rounded(reinterpret_cast<const float*>(w), cols * s.hidden, op, 1);
  int64_t ld = 0;
  return stage_f32(w, s.head, cols, s.hidden, s.hidden, 1, &ld);
}

void keep_count(float* workspace, const LmHeadLossShape& s, int64_t n) {
  const int32_t v[2] = {static_cast<int32_t>(n), 0};
  std::memcpy(workspace + lm_head_loss_layout(s).count, v, sizeof v);
}

// block (rows, cols) = hc (rows, H) @ Wc (cols, H)^T, soft-capped when s.softcap > 0
void logits_block(float* block, const float* hc, const float* Wc, int64_t rows, int64_t cols,
                  const LmHeadLossShape& s) {
  const int64_t H = s.hidden;
  gemm(false, true, rows, cols, H, 1.0f, hc, H, Wc, H, 0.0f, block, cols);
  if (s.softcap > 0) {
    const float cap = s.softcap;
    parallel_for(rows * cols, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) block[i] = cap * std::tanh(block[i] / cap);
    });
  }
}

}  // namespace

int64_t lm_head_loss_forward(float* loss, float* lse, const float* h, const void* W,
                             const int32_t* labels, double normalizer, const LmHeadLossShape& s,
                             float* workspace) {
  check(s);
  const int64_t T = s.tokens, V = s.vocab;
  const int64_t n = counted(labels, T, V);
  keep_count(workspace, s, n);
  std::vector<float> run_max(std::min(T, s.token_chunk)), target(std::min(T, s.token_chunk));
  std::vector<double> run_sum(run_max.size());
  double total = 0.0;
  for (int64_t t0 = 0; t0 < T; t0 += s.token_chunk) {
    const int64_t rows = std::min(s.token_chunk, T - t0);
    std::fill(run_max.begin(), run_max.end(), -std::numeric_limits<float>::infinity());
    std::fill(run_sum.begin(), run_sum.end(), 0.0);
    const float* hc = hidden_rows(h, t0, rows, s);
    for (int64_t v0 = 0; v0 < V; v0 += s.vocab_chunk) {
      const int64_t cols = std::min(s.vocab_chunk, V - v0);
      logits_block(workspace, hc, head_rows(W, v0, cols, s), rows, cols, s);
      parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* z = workspace + r * cols;
          const float mx = std::max(run_max[r], *std::max_element(z, z + cols));
          double sum = run_sum[r] * std::exp(static_cast<double>(run_max[r]) - mx);
          for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(z[c] - mx));
          run_max[r] = mx, run_sum[r] = sum;
          const int32_t y = labels[t0 + r];
          if (y >= v0 && y < v0 + cols) target[r] = z[y - v0];
        }
      });
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double l = run_max[r] + std::log(run_sum[r]);
      lse[t0 + r] = static_cast<float>(l);
      if (labels[t0 + r] >= 0) total += l - target[r];
    }
  }
  const double N = normalizer > 0 ? normalizer : static_cast<double>(n);
  *loss = static_cast<float>(total / N);  // 0 / 0: NaN, as PyTorch's mean over no token
  return n;
}

void lm_head_loss_backward(float* dh, float* dW, const float* lse, const float* h, const void* W,
                           const int32_t* labels, double normalizer, float dloss,
                           const LmHeadLossShape& s, float* workspace) {
  check(s);
  FTUNE_ASSERT(!dW || s.head == DType::F32, "lm_head_loss: a 16-bit head takes no gradient");
  const int64_t T = s.tokens, H = s.hidden, V = s.vocab;
  const int64_t n = counted(labels, T, V);
  keep_count(workspace, s, n);
  const DType op = lm_head_loss_operand(s);
  const double N = normalizer > 0 ? normalizer : static_cast<double>(n);
  if (n == 0) return;  // nothing counted: no gradient
  const float scale = static_cast<float>(dloss / N);
  for (int64_t t0 = 0; t0 < T; t0 += s.token_chunk) {
    const int64_t rows = std::min(s.token_chunk, T - t0);
    const float* hc = hidden_rows(h, t0, rows, s);
    for (int64_t v0 = 0; v0 < V; v0 += s.vocab_chunk) {
      const int64_t cols = std::min(s.vocab_chunk, V - v0);
      const float* Wc = head_rows(W, v0, cols, s);
      logits_block(workspace, hc, Wc, rows, cols, s);
      parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* g = workspace + r * cols;
          const int32_t y = labels[t0 + r];
          if (y < 0) {
            std::fill(g, g + cols, 0.0f);
            continue;
          }
          const float l = lse[t0 + r];
          // g = dloss/dz; soft-capped: z = s tanh(x / s) holds z, and dz/dx = 1 - (z / s)^2.
          const float cap = s.softcap;
          for (int64_t c = 0; c < cols; ++c) {
            const float z = g[c];
            float gz = std::exp(z - l) * scale;
            if (y == v0 + c) gz -= scale;
            g[c] = round_to(op, cap > 0 ? gz * (1.0f - (z / cap) * (z / cap)) : gz);
          }
        }
      });
      // dh[t0 : t0 + rows] += g @ W[v0 : v0 + cols];  dW[v0 : v0 + cols] += g^T @ h[t0 : ...]
      gemm(false, false, rows, H, cols, 1.0f, workspace, cols, Wc, H, 1.0f, dh + t0 * H, H);
      if (dW)
        gemm(true, false, cols, H, rows, 1.0f, workspace, cols, hc, H, 1.0f, dW + v0 * H, H);
    }
  }
}

}  // namespace cpu
}  // namespace ftune
