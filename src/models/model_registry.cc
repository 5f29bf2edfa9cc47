// The family registry: config.json's model_type -> a Backbone (see backbone.h). The BERT,
// DeBERTa-v2/v3, ModernBERT and decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 1 / 2 / 3) families
// are built in; tests register
// their own.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "core/error.h"
#include "io/json_file.h"
#include "models/backbone.h"
#include "models/bert/bert_family.h"
#include "models/deberta/deberta_family.h"
#include "models/decoder/decoder_family.h"
#include "models/modernbert/modernbert_family.h"

namespace ftune {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackboneFactory> factories;
  std::map<std::string, ModuleList> modules;
  std::vector<std::string> order;  // model types in registration order, for messages
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (const std::string& type : bert_model_types()) {
      reg->factories[type] = [](const nlohmann::json& j, const std::string& path) {
        return make_bert_backbone(EncoderConfig::from_json(j, path));
      };
      reg->order.push_back(type);
    }
    for (const std::string& type : decoder_model_types()) {
      reg->factories[type] = [](const nlohmann::json& j, const std::string& path) {
        return make_decoder_backbone(DecoderConfig::from_json(j, path));
      };
      reg->order.push_back(type);
    }
    reg->modules["llama"] = [] { return decoder_known_modules("model."); };
    reg->modules["gemma3"] = [] { return decoder_known_modules("model.language_model."); };
    reg->factories["deberta-v2"] = [](const nlohmann::json& j, const std::string& path) {
      return make_deberta_backbone(DebertaConfig::from_json(j, path));
    };
    reg->order.push_back("deberta-v2");
    reg->modules["deberta-v2"] = deberta_known_modules;
    reg->factories["modernbert"] = [](const nlohmann::json& j, const std::string& path) {
      return make_modernbert_backbone(ModernBertConfig::from_json(j, path));
    };
    reg->order.push_back("modernbert");
    reg->modules["modernbert"] = modernbert_known_modules;
    reg->modules["bert"] = [] {
      std::vector<ClassifierModule> m = bert_classifier_modules(true, 128);
      for (ClassifierModule& r : bert_classifier_modules(false, 128)) m.push_back(std::move(r));
      return m;
    };
    return reg;
  }();
  return *r;
}

}  // namespace

void register_backbone(const std::string& model_type, BackboneFactory factory,
                       ModuleList modules) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.factories.count(model_type)) r.order.push_back(model_type);
  r.factories[model_type] = std::move(factory);
  if (modules) r.modules[model_type] = std::move(modules);
}

std::vector<ClassifierModule> known_modules() {
  Registry& r = registry();
  std::vector<ModuleList> lists;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [type, list] : r.modules) lists.push_back(list);
  }
  std::vector<ClassifierModule> out;
  for (const ModuleList& list : lists) {
    const std::vector<ClassifierModule> names = list();
    out.insert(out.end(), names.begin(), names.end());
  }
  return out;
}

ModelSpec model_spec_from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  const std::string type = io::get_string(j, "model_type", path);
  Registry& r = registry();
  BackboneFactory factory;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.factories.find(type);
    if (it != r.factories.end()) factory = it->second;
    for (size_t i = 0; i < r.order.size(); ++i)
      known += (i == 0 ? "" : i + 1 == r.order.size() ? " or " : ", ") + r.order[i];
  }
  if (!factory)
    throw InputError(
        fmt::format("{}: model_type '{}' is not supported; expected {} (BERT, MiniLM, RoBERTa, "
                    "XLM-R, BGE rerankers, DeBERTa-v2/v3, ModernBERT, Llama, Mistral, Qwen2, Qwen3)",
                    path, type, known));
  return ModelSpec(factory(j, path));
}

}  // namespace ftune
