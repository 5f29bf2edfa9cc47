// A BERT-family directory's config.json as an EncoderConfig (see bert_checkpoint.h).
#include "models/bert/bert_checkpoint.h"

namespace ftune {

EncoderConfig load_model_config(const std::string& dir, const LoadOptions& options) {
  EncoderConfig config = EncoderConfig::from_file(model_config_path(dir));
  if (options.labels)
    config.set_labels(*options.labels);
  else if (options.num_labels)
    config.set_num_labels(*options.num_labels);
  return config;
}

}  // namespace ftune
