// Helpers of the end-to-end training tests. A tiny randomly initialised BERT classifier directory (config.json, model.safetensors and the
// MiniLM WordPiece tokenizer files) for fast end-to-end training tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftune::test {

// Writes the model into `dir`; hidden 32, 2 layers, 4 heads, 64 positions, the 30522-token
// uncased tokenizer of MiniLM (an embedding of `vocab_size` rows: fewer make a model too small
// for its tokenizer).
void write_tiny_bert(const std::string& dir, int num_labels = 2, int vocab_size = 30522);

// A synthetic pair task in JSONL: label 1 when the second text says "good", 0 when it says "bad",
// among distractor words; a tiny model learns it within a few dozen steps from a random start.
void write_pair_task(const std::string& path, int n, uint64_t seed);

// The run directory's metrics.jsonl lines without their timing fields (seconds, rates): equal for
// runs that did the same arithmetic.
std::vector<std::string> logged_metrics(const std::string& run_dir);
// The train lines' losses, in order.
std::vector<double> logged_train_losses(const std::string& run_dir);

}  // namespace ftune::test
