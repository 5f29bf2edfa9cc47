// A second model family, for the tests only: a one-layer toy that implements the backbone interface
// (models/backbone.h) with its own name map, adapter site and pooling (CPU, fp32), so that training,
// planning, HF save / load, PEFT adapters and packing are proven by more than the BERT family.
//
//   x   = embed[ids]                          (N, C)   "toy.embed.weight" (V, C)
//   u   = dropout(x W^T + b)                  (N, C)   "toy.blocks.0.mix.{weight,bias}", LoRA site
//                                                      "toy.blocks.0.mix"
//   y   = LayerNorm(x + u)                    (N, C)   "toy.blocks.0.norm.{weight,bias}"
//   z   = mean of y over each row's tokens    (B, C)   mean pooling (padding excluded)
//   out = z S^T                               (B, K)   "score.weight" (K, C), no bias
// config.json: {"model_type": "ftune-toy", "vocab_size", "hidden_size", "max_position_embeddings",
// "hidden_dropout_prob", "num_labels" or id2label}. fp32 only; LoRA but not DoRA.
#pragma once

#include <string>

namespace ftune::test {

// Registers the family under model_type "ftune-toy" (idempotent).
void register_toy_backbone();

// A randomly initialised toy model directory with the MiniLM tokenizer files: hidden 16.
void write_toy_model(const std::string& dir, int num_labels = 2);

}  // namespace ftune::test
