// Helpers of the end-to-end training tests. A tiny randomly initialised BERT classifier directory (config.json, model.safetensors and the
// MiniLM WordPiece tokenizer files) for fast end-to-end training tests.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune::test {

// Writes the model into `dir`; hidden 32, 2 layers, 4 heads, 64 positions, the 30522-token
// uncased tokenizer of MiniLM (an embedding of `vocab_size` rows: fewer make a model too small
// for its tokenizer).
void write_tiny_bert(const std::string& dir, int num_labels = 2, int vocab_size = 30522);
// Any registered family's classifier from its config.json content, initialised by the family's
// rule (seeded), saved with the MiniLM tokenizer files.
void write_random_model(const nlohmann::json& config, const std::string& dir, uint64_t seed);
// The same model as a causal LM (ModelSpec::as_causal_lm: its lm_head, or a tied embedding),
// saved as a *ForCausalLM directory with the MiniLM tokenizer files.
void write_random_causal_lm(const nlohmann::json& config, const std::string& dir, uint64_t seed);
// A training YAML for the pair task of write_pair_task in `dir` (train.jsonl, val.jsonl): 3
// epochs of 16 rows, max_length 24, 2 threads, logging every step, output in dir/run; `training`
// adds lines to the training section (and may open later sections). Returns its path.
std::string write_train_yaml(const std::string& dir, const std::string& run,
                             const std::string& model, const std::string& training);

// A synthetic pair task in JSONL: label 1 when the second text says "good", 0 when it says "bad",
// among distractor words; a tiny model learns it within a few dozen steps from a random start.
void write_pair_task(const std::string& path, int n, uint64_t seed);
// `groups` query groups of the pair task, each row with a "qid": one relevant row (label 1) and 2
// to 5 irrelevant ones (label 0; 2 + g % 4 in group g). Every third group's relevant row is a
// "bad" text among "good" ones, so ranking metrics stay below 1. With `teacher`, each row has a
// teacher score (column "teacher"), highest on the relevant row.
void write_query_groups(const std::string& path, int groups, uint64_t seed, bool teacher = false);

// The run directory's metrics.jsonl lines without their timing fields (seconds, rates): equal for
// runs that did the same arithmetic.
std::vector<std::string> logged_metrics(const std::string& run_dir);
// The train lines' losses, in order.
std::vector<double> logged_train_losses(const std::string& run_dir);
// A run of three epochs of six logged steps learned (single steps are noisy: dropout, 16 rows):
// the last epoch's six losses sum to less than the first epoch's, by a margin.
void expect_learns(const std::string& run_dir);

}  // namespace ftune::test
