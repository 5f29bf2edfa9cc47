// The trainable parameters of a model as one flat f32 range. Each parameter has its Hugging Face
// name, a shape, an offset into the flat range, and whether weight decay applies to it. Values,
// gradients and optimizer moments are parallel flat buffers with the same offsets, so the
// optimizer, gradient clipping and zeroing sweep everything in one pass, and a layer can view
// consecutive parameters (query, key, value) as one fused matrix.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace ftune {

struct ParamSpec {
  std::string name;  // HF name, e.g. "bert.encoder.layer.0.attention.self.query.weight"
  Shape shape;
  bool decay = true;   // AdamW weight decay applies (HF Trainer: not biases, not LayerNorm)
  int64_t offset = 0;  // elements from the start of the flat range
};

class ParamTable {
 public:
  // Appends a parameter right after the previous one (no padding: consecutive parameters form
  // contiguous blocks). Weight decay defaults to HF Trainer's rule.
  const ParamSpec& add(std::string name, Shape shape);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec* find(const std::string& name) const;
  const ParamSpec& at(const std::string& name) const;
  int64_t total() const { return total_; }

  // A view of one parameter (or of its gradient / moment) inside a flat buffer.
  static TensorView slice(TensorView flat, const ParamSpec& spec);
  // A view spanning `count` consecutive parameters starting with `first`, shaped `shape`.
  TensorView span(TensorView flat, const std::string& first, Shape shape) const;

  // HF Trainer's decay rule: no decay for biases and norm parameters (LayerNorm, RMSNorm).
  static bool default_decay(const std::string& name);

 private:
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;
  int64_t total_ = 0;
};

}  // namespace ftune
