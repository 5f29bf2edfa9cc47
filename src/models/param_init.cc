// HF-style parameter initialisation (see param_init.h).
#include "models/param_init.h"

#include "core/memory.h"

namespace ftune {
void init_param_like_hf(const ParamSpec& spec, TensorView dst, float initializer_range,
                        int64_t zero_row, std::mt19937_64& rng) {
  HostTensor host(DType::F32, spec.shape);  // zero-filled
  float* p = host.data<float>();
  const int64_t n = host.numel();
  if (spec.name.ends_with("LayerNorm.weight")) {
    for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  } else if (!spec.name.ends_with(".bias")) {
    std::normal_distribution<float> normal(0.0f, initializer_range);
    for (int64_t i = 0; i < n; ++i) p[i] = normal(rng);
    if (zero_row >= 0) {
      const int64_t C = spec.shape[1];
      for (int64_t c = 0; c < C; ++c) p[zero_row * C + c] = 0.0f;  // nn.Embedding(padding_idx)
    }
  }
  convert_copy(dst, host.view());  // a frozen GEMM weight may be stored in 16 bits
}

void init_all_params_like_hf(SequenceClassifier& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const ParamSpec& spec : model.params().specs())
    model.spec().backbone().init_param(spec, model.param(spec.name), rng);
  model.frozen_weights_changed();
}

}  // namespace ftune
