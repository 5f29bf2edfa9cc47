// Training FLOPs of an encoder classifier and model FLOP utilisation (MFU): the work a step does,
// counted from the model config and the token counts, over the GPU's peak.
//
// The count (matmul FLOPs only, PaLM's MFU convention: 2 FLOPs per multiply-add, backward = twice
// the forward, biases / norms / softmax / GELU / embedding lookups not counted). For a sequence
// of T tokens through L layers of width C, feed-forward F, and a classifier of K labels:
//
//   forward  = 2·T·L·(4·C² + 2·C·F)      Q, K, V, attention output and the two FFN projections
//            + 2·T²·C·L · 2              scores Q·Kᵀ and probabilities·V (all heads together)
//            + 2·(C² + C·K)              pooler (or RoBERTa's dense) and classifier, first token
//   training = 3 · forward
//            = 6·N·T + 12·L·C·T² + 6·(C² + C·K),   N = L·(4·C² + 2·C·F) non-embedding weights.
//
// That is 6·N + 12·L·C·T FLOPs per token, the number PyTorch-world MFU reports use (HF Trainer's
// own `total_flos` is 6·N·tokens with embeddings in N and no attention term: it is not used).
// The family supplies the shape numbers (Backbone::flops): with key / value heads of width kv
// (GQA) N counts 2·C·q + 2·C·kv per layer for the projections (q: heads x head_dim, C unless the
// config sets head_dim apart), a gated feed-forward (SwiGLU, GeGLU) 3·C·F, sliding-window attention
// T·min(T, window) query-key pairs (per layer where local and global layers alternate), and the
// attention products 12·q per pair. DeBERTa's disentangled attention adds, per c2p / p2c term and
// layer, 3 x 2·T·min(2·att_span, 2·T)·q: the products with the relative-position keys / queries
// over the buckets a row of T tokens can reach (HF computes all 2·att_span of them; the count is
// the work the model needs, as MFU should be). The position projections of the relative
// embeddings (once per batch, not per sequence) are not counted.
//
// Padded vs real: the GPU computes every padded position, so MFU counts the work actually done:
// each micro-batch at its padded length T (rows x T tokens). The real-token count (each row at
// its own length) is reported next to it, and real tokens are what tokens/s counts. A packed
// micro-batch computes no padding: its padded and real counts are equal. Adapters
// (LoRA/DoRA) are not counted, and frozen base weights are counted at 6·N although their weight
// gradients are skipped: MFU of PEFT runs is an upper estimate.
//
// Peak FLOP/s come from one table, src/train/gpu_peak_flops.json (compiled in; the HF peer script
// in bench/ reads the same file), by GPU name and the math the run uses: bf16 and fp16 runs the
// tensor-core rate of that type, fp32 runs the TF32 tensor rate when TF32 GEMMs are on, else the
// fp32 rate.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/device.h"
#include "models/backbone.h"
#include "train/precision.h"

namespace ftune {

struct Batch;

// The shape numbers the count needs (FlopModel, models/backbone.h), from the model's family.
FlopModel flop_model(const ModelSpec& model);

// N = L·(4·C² + 2·C·F) (GQA, gated: above): the weights every token goes through.
double matmul_params(const FlopModel& m);
// Query-key pairs of one sequence of `tokens` tokens, summed over the layers.
double attention_pairs(const FlopModel& m, int64_t tokens);
// Forward + backward FLOPs of one sequence of `tokens` tokens (the formula above).
double training_flops_per_sequence(const FlopModel& m, int64_t tokens);

// Work of the micro-batches a run computed: rows, tokens (padded: rows x T of each micro-batch;
// real: the attention mask's ones) and FLOPs counted both ways.
struct TrainingWork {
  int64_t sequences = 0;
  int64_t padded_tokens = 0;
  int64_t real_tokens = 0;
  double padded_flops = 0;  // each row at its micro-batch's padded length: the work done
  double real_flops = 0;    // each row at its own length

  // Adds one micro-batch as the model computes it (B rows padded to T).
  void add(const FlopModel& m, const Batch& micro_batch);
  // Adds rows [row0, row0 + rows) of a step batch, computed as one micro-batch padded to T, or
  // packed (T is then not read: each row is computed at its own length).
  void add(const FlopModel& m, const Batch& step_batch, int64_t row0, int64_t rows, int64_t T,
           bool packed = false);
  TrainingWork& operator+=(const TrainingWork& other);
};

// A table entry chosen for a device and a precision.
struct PeakFlops {
  std::string gpu;     // the table's name, e.g. "H100 SXM"
  std::string math;    // "bf16 tensor", "fp16 tensor", "tf32 tensor", "fp32"
  double flops = 0;    // FLOP/s
  std::string source;  // the datasheet line
};

// The peak of the GPU called `device_name` (as cudaGetDeviceProperties names it, e.g.
// "NVIDIA H100 80GB HBM3") for `precision` (fp32 with `tf32`: the TF32 rate); nullopt when the GPU
// is not in the table or lacks that math.
std::optional<PeakFlops> peak_flops(const std::string& device_name, Precision precision,
                                    bool tf32);
// The TF32 switch of the CUDA fp32 GEMMs in the backend context (ops/backend_context.h; false in
// builds without CUDA).
bool tf32_gemms_on();
// The GPU name of a CUDA device ("" for the CPU and in builds without CUDA).
std::string gpu_name(Device device);

// summary.json fields of a run: flops_per_sample (padded, what MFU uses) and
// flops_per_sample_real, padded_tokens_per_sample, padding_fraction (of the computed tokens, the
// share that was padding), model_tflops_per_s (flops_per_sample x samples_per_s), and when the
// device's peak is known peak_tflops, peak (the table entry) and mfu. Data-parallel runs: `work`
// is every rank's and `samples_per_s` the ranks' together; model_tflops_per_s counts all `ranks`
// devices, model_tflops_per_s_per_device one of them, and mfu is over the peak of all of them
// (each device's share of its own peak, the ranks doing equal work).
nlohmann::json flops_summary(const TrainingWork& work, double samples_per_s, Device device,
                             Precision precision = Precision::FP32, bool tf32 = false,
                             int ranks = 1);

}  // namespace ftune
