// Batched inference: logits for many tokenized rows with a model loaded from a HF directory.
// Rows are sorted by length and cut into batches padded to their own longest row (dynamic
// padding, data/batcher.h), and cut further where a batch's padding would pass 12.5 % of its
// real tokens, then the logits are returned in input order. The arena is planned for
// the longest row actually present, not for max_position_embeddings.
//
// On the CPU the linear layers' weights are packed once for oneDNN's matmul after loading
// (ops/cpu_matmul.h; the plain GEMM where that cannot run), and FTUNE_SCORING_PRECISION=bf16 scores
// with bf16 weights and inputs, fp32 accumulation, on CPUs with native bf16 (default fp32).
//
// LoadedClassifier keeps a model loaded between calls (the Python package's Model): its arena is
// planned for the largest batch and longest row seen so far and grows (weights read again) only
// when a call needs more. One call at a time per object (callers serialise; the Python binding
// holds a lock).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/device.h"
#include "data/examples.h"
#include "models/backbone.h"
#include "models/hf_checkpoint.h"
#include "models/sequence_classifier.h"
#include "ops/cpu_matmul.h"

namespace ftune {

struct Predictions {
  ModelInfo config;                        // of the loaded model (labels for the output)
  std::vector<std::vector<float>> logits;  // one row of num_labels per input, in input order
};

class LoadedClassifier {
 public:
  LoadedClassifier(std::string model_dir, Device device);
  ~LoadedClassifier();
  LoadedClassifier(const LoadedClassifier&) = delete;
  LoadedClassifier& operator=(const LoadedClassifier&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const ModelInfo& info() const { return spec_.info(); }
  const std::string& model_dir() const { return model_dir_; }
  Device device() const { return device_; }
  // The CPU scoring precision (FTUNE_SCORING_PRECISION, fp32 by default); set_precision drops the
  // packed weights of the other precision.
  cpu::MatmulPrecision precision() const { return precision_; }
  void set_precision(cpu::MatmulPrecision precision);
  // The CPU's packed weights (null before the first call or on a GPU).
  const cpu::PackedWeights* packed_weights() const { return packed_.get(); }

  // Logits of every row, in input order, into `out` (rows x num_labels, row-major). Rows need
  // input_ids; empty token_type_ids mean all zeros; labels are ignored. InputError "row N: ..."
  // (1-based) for a row the model cannot take.
  void predict(const std::vector<data::TokenizedExample>& rows, int64_t batch_size, float* out);

 private:
  void ensure_capacity(int64_t batch, int64_t seq);

  std::string model_dir_;
  Device device_;
  ModelSpec spec_;
  int64_t max_batch_ = 0, max_seq_ = 0;  // what the arena holds now
  std::unique_ptr<SequenceClassifier> model_;
  std::unique_ptr<Arena> arena_;
  cpu::MatmulPrecision precision_ = cpu::MatmulPrecision::F32;
  std::unique_ptr<cpu::PackedWeights> packed_;  // for model_'s weights, made with it
};

// The batches predict() runs: rows sorted by length (stable), cut at batch_size rows and where the
// next row would make the batch's padding (rows x its longest row - its real tokens) exceed
// kPaddingSlack of its real tokens. On a reranker's length mix (19 to 256 tokens) fixed batches of
// 32 padded 41 % more tokens than the rows held, all of it GEMM work.
constexpr double kPaddingSlack = 0.125;
std::vector<std::vector<int64_t>> scoring_batches(const std::vector<data::TokenizedExample>& rows,
                                                  int64_t batch_size);

// One call of a LoadedClassifier (loads, predicts, frees).
Predictions predict_logits(const std::string& model_dir,
                           const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                           Device device);

}  // namespace ftune
