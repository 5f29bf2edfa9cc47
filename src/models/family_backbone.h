// What every model family's Backbone and BackboneModel repeat, written once, so that a family is
// its config, its parameter table, its forward / backward and a few rules (backbone.h).
// FamilyModel<Ops> is the BackboneModel of a family written as free functions (ModernBERT, the
// decoders); common_info, token_rows and upload_inv_freq are the small pieces families share.
//
// FamilyBackbone<Family, Config> holds the family's config and the ModelInfo it gives, and answers
// the questions whose answer is the same for every family: info(), config_json(), with_labels and
// with_dropout (a copy of the config, changed, as a new Family), and row_positions as 0..n-1 over
// the whole row. The family class derives from it (CRTP), passes the function that gives its
// ModelInfo (its numbers for code outside models/) and provides, besides the Backbone methods that
// are its own, a constructor from Config and
//   static void set_dropout(Config&, const DropoutRates&);   // training.*_dropout onto its config
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "models/backbone.h"
#include "models/rope_config.h"

namespace ftune {

// The ModelInfo fields every family's config spells alike (heads: no grouped-query attention; the
// longest input: the position table's), every family packing; the family sets the rest.
template <typename Config>
ModelInfo common_info(const Config& c) {
  ModelInfo i;
  i.num_layers = c.num_layers;
  i.hidden_size = c.hidden_size;
  i.num_heads = i.num_kv_heads = c.num_heads;
  i.intermediate_size = c.intermediate_size;
  i.vocab_size = c.vocab_size;
  i.max_position_embeddings = i.max_tokens = c.max_position_embeddings;
  i.attention_dropout = c.attention_dropout;
  i.id2label = c.id2label;
  i.packing = true;
  return i;
}

template <typename Family, typename Config>
class FamilyBackbone : public Backbone {
 public:
  FamilyBackbone(Config c, ModelInfo (*info_of)(const Config&))
      : c_(std::move(c)), info_(info_of(c_)) {}

  const ModelInfo& info() const override { return info_; }

  std::shared_ptr<const Backbone> with_labels(std::vector<std::string> labels) const override {
    if (labels.empty()) throw InputError("a classifier needs at least one label");
    Config c = c_;
    c.id2label = std::move(labels);
    return std::make_shared<Family>(std::move(c));
  }

  std::shared_ptr<const Backbone> with_dropout(const DropoutRates& r) const override {
    Config c = c_;
    Family::set_dropout(c, r);
    return std::make_shared<Family>(std::move(c));
  }

  nlohmann::json config_json() const override { return c_.to_json(); }

  // Positions 0..n-1 over the whole row, padding included (HF's DeBERTa, ModernBERT and decoders).
  void row_positions(const int32_t*, int64_t n, int32_t* pos) const override {
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t);
  }

 protected:
  // The FLOP model's dense part (train/flops.h): layers, hidden, intermediate and label counts.
  FlopModel dense_flops() const {
    FlopModel f;
    f.layers = c_.num_layers;
    f.hidden = c_.hidden_size;
    f.intermediate = c_.intermediate_size;
    f.num_labels = c_.num_labels();
    return f;
  }

  // A parameter's HF name, and without `prefix` (a base model saved on its own) where it has it.
  static std::vector<std::string> with_unprefixed(const std::string& name, const std::string& prefix) {
    if (name.rfind(prefix, 0) != 0) return {name};
    return {name, name.substr(prefix.size())};
  }

  Config c_;
  ModelInfo info_;
};

// A buffer of per-token rows as a family's ops read it: (N, C) packed, (B, T, C) padded.
inline TensorView token_rows(const TensorView& buffer, const TokenInputs& in, int64_t C) {
  return in.packed() ? buffer.prefix({in.N, C}) : buffer.prefix({in.B, in.T, C});
}

// The BackboneModel of a family whose model is free functions over (config, weights, activations),
// the head included. Ops names the types and functions:
//   using Config, Weights (with .adapters and .shadow), Acts (with .hidden, the top layer's output);
//   buffers(c, shape, acts, table)                  plans and binds the activations (buffer_table.h)
//   bind(c, views) -> Weights                       the weights in a flat parameter buffer
//   tables(c, acts)                                 constant tables written once bound (RoPE)
//   forward(c, w, acts, in, d) -> logits;  backward(c, w, g, acts, dlogits, in, d)
template <typename Ops>
class FamilyModel final : public BackboneModel {
 public:
  FamilyModel(const typename Ops::Config& c, const BackboneShape& shape) : c_(c), shape_(shape) {}

  void buffers(BufferTable& t) override { Ops::buffers(c_, shape_, a_, t); }

  // The values, the 16-bit shadow of the GEMM weights (its layers, where there is one) and, when
  // training, the gradients; the adapters' values and gradients go alongside. Frozen parameters
  // (adapters) have undefined gradient views; their GEMMs are skipped.
  void bind(const BoundParams& p) override {
    w_ = Ops::bind(c_, p.values);
    w_.adapters = p.adapters;
    if (p.shadow.table) w_.shadow = Ops::bind(c_, p.shadow).layers;
    if (shape_.training) {
      g_ = Ops::bind(c_, p.grads);
      g_.adapters = p.adapter_grads;
    }
    Ops::tables(c_, a_);
  }

  TensorView forward(const TokenInputs& in, const DropoutPlan& d) override {
    const TensorView logits = Ops::forward(c_, w_, a_, in, d);
    hidden_ = token_rows(a_.hidden, in, c_.hidden_size);
    return logits;
  }

  void backward(TensorView dlogits, const TokenInputs& in, const DropoutPlan& d) override {
    Ops::backward(c_, w_, g_, a_, dlogits, in, d);
  }

  TensorView hidden() const override { return hidden_; }

 private:
  typename Ops::Config c_;
  BackboneShape shape_;
  typename Ops::Weights w_, g_;
  typename Ops::Acts a_;
  TensorView hidden_;
};

// RoPE's inverse frequencies (rope_config.h) written into a model's planned buffer, at bind.
inline void upload_inv_freq(TensorView dst, const RopeConfig& rope, int64_t head_dim,
                            bool long_seq = false) {
  const std::vector<float> inv = rope.inv_freq(head_dim, long_seq);
  HostTensor host(DType::F32, Shape{static_cast<int64_t>(inv.size())});
  std::copy(inv.begin(), inv.end(), host.data<float>());
  copy(dst, host.view());
}

}  // namespace ftune
