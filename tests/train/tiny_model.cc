// Tiny model writer (see tiny_model.h).
#include "tiny_model.h"

#include <filesystem>

#include "models/hf_checkpoint.h"
#include "models/param_init.h"
#include "test_util.h"

namespace ftune::test {

void write_tiny_bert(const std::string& dir, int num_labels) {
  nlohmann::json j = {{"model_type", "bert"},
                      {"vocab_size", 30522},
                      {"hidden_size", 32},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"intermediate_size", 64},
                      {"max_position_embeddings", 64},
                      {"type_vocab_size", 2},
                      {"hidden_act", "gelu"},
                      {"hidden_dropout_prob", 0.1},
                      {"attention_probs_dropout_prob", 0.1},
                      {"initializer_range", 0.02},
                      {"num_labels", num_labels},
                      {"pad_token_id", 0}};
  SequenceClassifier model(EncoderConfig::from_json(j, "tiny"), {1, 1, false});
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  init_all_params_like_hf(model, 3);
  save_model(model, dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(fixtures_dir() + "/tokenizers/minilm/" + f, dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
}

}  // namespace ftune::test
