// The BERT family's name map: every parameter of the encoder under its Hugging Face name, its
// shape, and the weight view it binds — one table drives adding the parameters, binding their
// views (values, gradients, the 16-bit shadow) and naming the adapter sites.
#include <fmt/format.h>

#include "core/error.h"
#include "models/bert/bert_family.h"
#include "models/bert/encoder.h"

namespace ftune {
namespace {

// A shape in units of the config: V vocabulary, P positions, Y token types, C hidden,
// F intermediate, 0 none (a vector).
enum class Dim : char { V, P, Y, C, F, None };

int64_t size_of(const EncoderConfig& c, Dim d) {
  switch (d) {
    case Dim::V:
      return c.vocab_size;
    case Dim::P:
      return c.max_position_embeddings;
    case Dim::Y:
      return c.type_vocab_size;
    case Dim::C:
      return c.hidden_size;
    case Dim::F:
      return c.intermediate_size;
    case Dim::None:
      break;
  }
  return 0;
}

Shape shape_of(const EncoderConfig& c, Dim rows, Dim cols) {
  return cols == Dim::None ? Shape{size_of(c, rows)} : Shape{size_of(c, rows), size_of(c, cols)};
}

struct EmbeddingParam {
  const char* name;  // under "<prefix>.embeddings."
  Dim rows, cols;
  TensorView EncoderWeights::*view;
};

constexpr EmbeddingParam kEmbeddingParams[] = {
    {"word_embeddings.weight", Dim::V, Dim::C, &EncoderWeights::word},
    {"position_embeddings.weight", Dim::P, Dim::C, &EncoderWeights::position},
    {"token_type_embeddings.weight", Dim::Y, Dim::C, &EncoderWeights::token_type},
    {"LayerNorm.weight", Dim::C, Dim::None, &EncoderWeights::emb_ln_w},
    {"LayerNorm.bias", Dim::C, Dim::None, &EncoderWeights::emb_ln_b},
};

// Query, key and value (weights, then biases) are consecutive in the table: the first of each
// triple binds the fused (3C, C) matrix / (3C) bias, spanning all three.
struct LayerParam {
  const char* name;  // under "<prefix>.encoder.layer.<l>."
  Dim rows, cols;
  TensorView LayerWeights::*view;  // null: part of the span bound by an earlier entry
  int span;                        // parameters the view spans
};

constexpr LayerParam kLayerParams[] = {
    {"attention.self.query.weight", Dim::C, Dim::C, &LayerWeights::qkv_w, 3},
    {"attention.self.key.weight", Dim::C, Dim::C, nullptr, 0},
    {"attention.self.value.weight", Dim::C, Dim::C, nullptr, 0},
    {"attention.self.query.bias", Dim::C, Dim::None, &LayerWeights::qkv_b, 3},
    {"attention.self.key.bias", Dim::C, Dim::None, nullptr, 0},
    {"attention.self.value.bias", Dim::C, Dim::None, nullptr, 0},
    {"attention.output.dense.weight", Dim::C, Dim::C, &LayerWeights::attn_out_w, 1},
    {"attention.output.dense.bias", Dim::C, Dim::None, &LayerWeights::attn_out_b, 1},
    {"attention.output.LayerNorm.weight", Dim::C, Dim::None, &LayerWeights::ln1_w, 1},
    {"attention.output.LayerNorm.bias", Dim::C, Dim::None, &LayerWeights::ln1_b, 1},
    {"intermediate.dense.weight", Dim::F, Dim::C, &LayerWeights::ffn_in_w, 1},
    {"intermediate.dense.bias", Dim::F, Dim::None, &LayerWeights::ffn_in_b, 1},
    {"output.dense.weight", Dim::C, Dim::F, &LayerWeights::ffn_out_w, 1},
    {"output.dense.bias", Dim::C, Dim::None, &LayerWeights::ffn_out_b, 1},
    {"output.LayerNorm.weight", Dim::C, Dim::None, &LayerWeights::ln2_w, 1},
    {"output.LayerNorm.bias", Dim::C, Dim::None, &LayerWeights::ln2_b, 1},
};

// The adaptable linears of a layer, by EncoderSite: their module names and (in, out) features.
struct SiteName {
  const char* module;  // under "<prefix>.encoder.layer.<l>."
  Dim in, out;
};

constexpr SiteName kSites[kEncoderSites] = {
    {"attention.self.query", Dim::C, Dim::C},   {"attention.self.key", Dim::C, Dim::C},
    {"attention.self.value", Dim::C, Dim::C},   {"attention.output.dense", Dim::C, Dim::C},
    {"intermediate.dense", Dim::C, Dim::F},     {"output.dense", Dim::F, Dim::C},
};

std::string embedding_prefix(const EncoderConfig& c) {
  return c.weight_prefix() + ".embeddings.";
}

std::string layer_prefix(const EncoderConfig& c, int64_t l) {
  return fmt::format("{}.encoder.layer.{}.", c.weight_prefix(), l);
}

Shape span_shape(const Shape& one, int span) {
  return one.rank() == 1 ? Shape{span * one[0]} : Shape{span * one[0], one[1]};
}

std::vector<LayerWeights> bind_layers(const EncoderConfig& c, const ParamViews& p) {
  std::vector<LayerWeights> layers(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const LayerParam& lp : kLayerParams)
      if (lp.view)
        layers[l].*lp.view = p.span(layer_prefix(c, l) + lp.name,
                                    span_shape(shape_of(c, lp.rows, lp.cols), lp.span));
  return layers;
}

}  // namespace

const char* encoder_site_suffix(EncoderSite s) {
  return kSites[static_cast<int>(s)].module;
}

std::vector<AdapterSite> encoder_adapter_sites(const EncoderConfig& c) {
  std::vector<AdapterSite> sites;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int k = 0; k < kEncoderSites; ++k)
      sites.push_back(AdapterSite{l, k, layer_prefix(c, l) + kSites[k].module,
                                  size_of(c, kSites[k].in), size_of(c, kSites[k].out)});
  return sites;
}

void add_encoder_params(const EncoderConfig& c, ParamTable& t) {
  for (const EmbeddingParam& e : kEmbeddingParams)
    t.add(embedding_prefix(c) + e.name, shape_of(c, e.rows, e.cols));
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const LayerParam& lp : kLayerParams)
      t.add(layer_prefix(c, l) + lp.name, shape_of(c, lp.rows, lp.cols));
}

EncoderWeights bind_encoder_weights(const EncoderConfig& c, const ParamViews& p) {
  EncoderWeights w;
  for (const EmbeddingParam& e : kEmbeddingParams) w.*e.view = p.get(embedding_prefix(c) + e.name);
  w.layers = bind_layers(c, p);
  return w;
}

std::pair<int64_t, int64_t> encoder_layer_range(const EncoderConfig& c, const ParamTable& t) {
  if (c.num_layers == 0) return {0, 0};
  const int64_t begin = t.at(layer_prefix(c, 0) + kLayerParams[0].name).offset;
  const ParamSpec& last =
      t.at(layer_prefix(c, c.num_layers - 1) + std::end(kLayerParams)[-1].name);
  return {begin, last.offset + last.shape.numel() - begin};
}

std::vector<LayerWeights> bind_layer_weights(const EncoderConfig& c, const ParamViews& p) {
  const auto [begin, count] = encoder_layer_range(c, *p.table);
  if (p.base != begin || p.flat.numel() != count)
    throw InternalError(fmt::format("layer weights: buffer of {} elements from {} for {} from {}",
                                    p.flat.numel(), p.base, count, begin));
  return bind_layers(c, p);
}

}  // namespace ftune
