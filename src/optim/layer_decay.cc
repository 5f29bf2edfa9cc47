// Layer-wise LR multipliers from parameter names (see layer_decay.h).
#include "optim/layer_decay.h"

#include <cmath>
#include <regex>

namespace ftune {

double layer_decay_scale(const std::string& name, int64_t num_layers, double decay) {
  static const std::regex layer_re(R"((^|\.)layer\.(\d+)\.)");
  std::smatch m;
  if (std::regex_search(name, m, layer_re))
    return std::pow(decay, static_cast<double>(num_layers - std::stoll(m[2].str())));
  if (name.find("embeddings.") != std::string::npos)
    return std::pow(decay, static_cast<double>(num_layers + 1));
  return 1.0;
}

void apply_layer_decay(AdamW& optimizer, const ParamTable& params, int64_t num_layers,
                       double decay) {
  for (const ParamSpec& p : params.specs())
    optimizer.set_lr_scale(p.name,
                           static_cast<float>(layer_decay_scale(p.name, num_layers, decay)));
}

}  // namespace ftune
