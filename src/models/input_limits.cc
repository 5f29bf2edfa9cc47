// Input limits of a model directory (see input_limits.h).
#include "models/input_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace ftune {

void check_tokenizer_vocabulary(const text::Tokenizer& tokenizer, const ModelInfo& config,
                                const std::string& model_dir) {
  const int64_t tokens = static_cast<int64_t>(tokenizer.vocab_size());
  if (tokens <= config.vocab_size) return;
  const std::filesystem::path dir(model_dir);
  throw InputError(fmt::format(
      "{} has {} tokens, but the model's vocabulary ({} vocab_size) has only {}: token ids {} "
      "and up have no embedding. Use the tokenizer that was trained with this model",
      (dir / "tokenizer.json").string(), tokens, (dir / "config.json").string(), config.vocab_size,
      config.vocab_size));
}

int64_t inference_max_length(const ModelInfo& config, const text::Tokenizer& tokenizer,
                             std::optional<int64_t> requested, const std::string& model_dir,
                             const std::string& option) {
  const int64_t positions = config.max_tokens;
  if (requested) {
    if (*requested > positions)
      throw InputError(fmt::format(
          "{} {} is more than the model holds: {}/config.json has max_position_embeddings {}, "
          "room for {} tokens; use at most {}",
          option, *requested, model_dir, config.max_position_embeddings, positions, positions));
    return *requested;
  }
  if (const auto model_max = tokenizer.model_max_length()) return std::min(positions, *model_max);
  return positions;
}

}  // namespace ftune
