// ftune._ftune: the Python binding over the engine (nanobind). Tokenizers, loaded models that
// score text (models/text_scorer.h) and training runs (train/trainer.h); python/ftune/__init__.py
// gives them their Python face. Compute runs with the GIL released; a Model serialises its own
// calls with a lock, so it may be shared by threads. Errors: InputError -> ValueError, a stopped
// run (Ctrl-C, SIGTERM) -> KeyboardInterrupt after its checkpoint, other ftune errors ->
// RuntimeError. The search (ftune.hpo) is bound in hpo_module.cc, causal-LM scoring in
// causal_lm_module.cc.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "data/memory_source.h"
#include "ops/cpu_matmul.h"
#include "models/text_scorer.h"
#include "text/tokenizer.h"
#include "train/config_keys.h"
#include "train/ranking_metrics.h"
#include "train/trainer.h"

namespace nb = nanobind;
using namespace nb::literals;

void bind_hpo(nb::module_& m);        // hpo_module.cc
void bind_causal_lm(nb::module_& m);  // causal_lm_module.cc

namespace {

// One input: a str, or a (str, str) pair as a tuple or list.
std::vector<ftune::text::TextPair> text_inputs(const nb::sequence& inputs) {
  std::vector<ftune::text::TextPair> out;
  size_t i = 0;
  for (nb::handle item : inputs) {
    if (nb::isinstance<nb::str>(item)) {
      out.push_back({nb::cast<std::string>(item), std::nullopt});
    } else if ((nb::isinstance<nb::tuple>(item) || nb::isinstance<nb::list>(item)) &&
               nb::len(item) == 2 && nb::isinstance<nb::str>(item[0]) &&
               nb::isinstance<nb::str>(item[1])) {
      out.push_back({nb::cast<std::string>(item[0]), nb::cast<std::string>(item[1])});
    } else {
      throw nb::type_error(("input " + std::to_string(i) +
                            ": expected a str or a (str, str) pair, got " +
                            nb::cast<std::string>(nb::str(item.type())))
                               .c_str());
    }
    ++i;
  }
  return out;
}

using FloatArray = nb::ndarray<nb::numpy, float, nb::ndim<2>>;

// A (rows x cols) float32 array owning `data` (no copy).
FloatArray owned_array(std::vector<float>* data, size_t rows, size_t cols) {
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return FloatArray(data->data(), {rows, cols}, owner);
}

class Model {
 public:
  Model(const std::string& dir, const std::string& device, std::optional<int64_t> max_length,
        const std::string& pair_template)
      : scorer_(dir, ftune::usable_device(device, "device"), max_length, pair_template) {}

  FloatArray predict(const nb::sequence& inputs, int64_t batch_size) {
    const std::vector<ftune::text::TextPair> rows = text_inputs(inputs);
    return scored(rows.size(), [&](float* out) { scorer_.score(rows, batch_size, out); });
  }

  // Logits of rows of token ids (and optional token type ids of the same lengths).
  FloatArray predict_ids(const nb::sequence& input_ids, const nb::object& token_type_ids,
                         int64_t batch_size) {
    std::vector<ftune::data::TokenizedExample> rows;
    const auto ids_of = [](nb::handle row, const char* what, size_t i) {
      std::vector<int32_t> ids;
      if (!nb::isinstance<nb::sequence>(row) || nb::isinstance<nb::str>(row))
        throw ftune::InputError(fmt::format("{} row {}: expected a sequence of ints", what, i + 1));
      for (nb::handle v : row) {
        if (!nb::isinstance<nb::int_>(v) && !PyIndex_Check(v.ptr()))
          throw ftune::InputError(fmt::format("{} row {}: expected ints, got a {}", what, i + 1,
                                              nb::type_name(v.type()).c_str()));
        const int64_t id = nb::cast<int64_t>(nb::int_(v));
        if (id < 0 || id > INT32_MAX)
          throw ftune::InputError(fmt::format("{} row {}: id {} is out of range", what, i + 1, id));
        ids.push_back(static_cast<int32_t>(id));
      }
      if (ids.empty()) throw ftune::InputError(fmt::format("{} row {}: no ids", what, i + 1));
      return ids;
    };
    size_t i = 0;
    for (nb::handle row : input_ids) {
      rows.emplace_back();
      rows.back().input_ids = ids_of(row, "input_ids", i++);
    }
    if (!token_type_ids.is_none()) {
      const nb::sequence types = nb::cast<nb::sequence>(token_type_ids);
      if (nb::len(types) != rows.size())
        throw ftune::InputError(
            fmt::format("token_type_ids has {} rows, input_ids {}", nb::len(types), rows.size()));
      i = 0;
      for (nb::handle row : types) {
        rows[i].token_type_ids = ids_of(row, "token_type_ids", i);
        if (rows[i].token_type_ids.size() != rows[i].input_ids.size())
          throw ftune::InputError(fmt::format("token_type_ids row {}: {} ids for {} input_ids",
                                              i + 1, rows[i].token_type_ids.size(),
                                              rows[i].input_ids.size()));
        ++i;
      }
    }
    return scored(rows.size(), [&](float* out) { scorer_.score_tokens(rows, batch_size, out); });
  }

  // Logits of `rows` rows written by `score` into a NumPy array that owns them, computed with the
  // GIL released and this model's lock held.
  template <typename Score>
  FloatArray scored(size_t rows, const Score& score) {
    const size_t K = static_cast<size_t>(scorer_.num_labels());
    auto* out = new std::vector<float>(rows * K);
    try {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      score(out->data());
    } catch (...) {
      delete out;
      throw;
    }
    return owned_array(out, rows, K);
  }

  // Documents by score for one query, best first: (index into docs, score).
  std::vector<std::pair<int64_t, double>> rank(const std::string& query,
                                               const std::vector<std::string>& docs,
                                               int64_t batch_size) {
    std::vector<ftune::text::TextPair> rows;
    for (const std::string& d : docs) rows.push_back({query, d});
    const int64_t K = scorer_.num_labels();
    std::vector<float> logits(rows.size() * K);
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      scorer_.score(rows, batch_size, logits.data());
    }
    std::vector<std::pair<int64_t, double>> out;
    for (size_t i = 0; i < rows.size(); ++i)
      out.emplace_back(static_cast<int64_t>(i), ftune::row_score(logits.data() + i * K, K));
    std::stable_sort(out.begin(), out.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
  }

  std::vector<std::string> labels() const { return scorer_.info().id2label; }
  int64_t num_labels() const { return scorer_.num_labels(); }
  int64_t max_length() const { return scorer_.max_length(); }
  std::string problem_type() const { return scorer_.spec().problem_type(); }
  std::vector<std::vector<int64_t>> tokenize(const nb::sequence& inputs) const {
    std::vector<std::vector<int64_t>> out;
    for (const auto& row : scorer_.tokenize(text_inputs(inputs)))
      out.emplace_back(row.input_ids.begin(), row.input_ids.end());
    return out;
  }

 private:
  ftune::TextScorer scorer_;
  std::mutex mutex_;
};

// train(config_yaml_or_path, is_path, overrides, resume, on_eval, on_log) -> (summary as JSON
// text, output.dir).
ftune::TrainConfig parse_config(const std::string& config, bool is_path,
                                const std::vector<std::string>& overrides) {
  if (is_path) return ftune::TrainConfig::load(config, overrides, "override");
  YAML::Node root = YAML::Load(config);
  ftune::apply_overrides(root, overrides);
  return ftune::TrainConfig::parse(root, ftune::KeyOrigin("the config dict", overrides, "override"));
}

// config_values(config_yaml_or_path, is_path, overrides) -> {key: value as YAML writes it} for
// every key of the table: the config train() would run, resolved (presets, defaults).
std::map<std::string, std::string> config_values(const std::string& config, bool is_path,
                                                 const std::vector<std::string>& overrides) {
  const ftune::TrainConfig cfg = parse_config(config, is_path, overrides);
  std::map<std::string, std::string> out;
  for (const ftune::ConfigKey& k : ftune::config_keys())
    if (k.show) out[k.key] = k.show(cfg);
  return out;
}

std::pair<std::string, std::string> train(const std::string& config, bool is_path,
                                          const std::vector<std::string>& overrides, bool resume,
                                          nb::object on_eval, nb::object on_log) {
  ftune::TrainConfig cfg = parse_config(config, is_path, overrides);
  ftune::TrainOptions options;
  options.resume = resume;
  if (!on_eval.is_none())
    options.on_eval = [on_eval](int64_t step, const nlohmann::json& eval) {
      nb::gil_scoped_acquire gil;
      nb::object json = nb::module_::import_("json");
      return nb::cast<bool>(nb::bool_(on_eval(step, json.attr("loads")(eval.dump()))));
    };
  if (!on_log.is_none())
    options.on_log = [on_log](const nlohmann::json& line) {
      nb::gil_scoped_acquire gil;
      on_log(nb::module_::import_("json").attr("loads")(line.dump()));
    };
  nlohmann::json summary;
  {
    nb::gil_scoped_release release;
    summary = ftune::run_training(cfg, options);
  }
  return {summary.dump(), cfg.output.dir};
}

}  // namespace

NB_MODULE(_ftune, m) {
  m.doc() = "ftune's engine: tokenizers, models that score text, training runs";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ftune::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ftune::Interrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    } catch (const ftune::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  nb::class_<ftune::text::Encoding>(m, "Encoding")
      .def_ro("ids", &ftune::text::Encoding::ids)
      .def_ro("type_ids", &ftune::text::Encoding::type_ids)
      .def_ro("attention_mask", &ftune::text::Encoding::attention_mask)
      .def_ro("special_tokens_mask", &ftune::text::Encoding::special_tokens_mask)
      .def("__len__", &ftune::text::Encoding::size);

  nb::class_<ftune::text::Tokenizer>(m, "Tokenizer")
      .def_static("from_file", &ftune::text::Tokenizer::from_file, "path"_a,
                  "Loads a tokenizer.json file")
      .def_static("from_pretrained", &ftune::text::Tokenizer::from_dir, "directory"_a,
                  "Loads DIR/tokenizer.json (and DIR/tokenizer_config.json)")
      .def(
          "encode_batch",
          [](const ftune::text::Tokenizer& tok, const nb::sequence& inputs, bool add_special_tokens,
             std::optional<int64_t> max_length) {
            std::vector<ftune::text::TextPair> rows = text_inputs(inputs);
            ftune::text::EncodeOptions opts = tok.default_options();
            opts.add_special_tokens = add_special_tokens;
            if (max_length) {
              opts.truncation = ftune::text::Truncation::kLongestFirst;
              opts.max_length = *max_length;
            }
            nb::gil_scoped_release release;
            return tok.encode_batch(rows, opts);
          },
          "inputs"_a, "add_special_tokens"_a = true, "max_length"_a = nb::none(),
          "Encodes str or (str, str) inputs as tokenizers' Tokenizer.encode_batch does");

  nb::class_<Model>(m, "Model")
      .def(nb::init<const std::string&, const std::string&, std::optional<int64_t>,
                    const std::string&>(),
           "model_dir"_a, "device"_a = "cpu", "max_length"_a = nb::none(), "pair_template"_a = "")
      .def("predict", &Model::predict, "inputs"_a, "batch_size"_a = 32)
      .def("predict_ids", &Model::predict_ids, "input_ids"_a, "token_type_ids"_a.none(),
           "batch_size"_a = 32)
      .def("rank", &Model::rank, "query"_a, "documents"_a, "batch_size"_a = 32)
      .def("tokenize", &Model::tokenize, "inputs"_a)
      .def_prop_ro("labels", &Model::labels)
      .def_prop_ro("num_labels", &Model::num_labels)
      .def_prop_ro("max_length", &Model::max_length)
      .def_prop_ro("problem_type", &Model::problem_type);

  // The compute threads of every CPU kernel (the CLI's --threads; default: all cores).
  m.def("set_threads", [](int n) { ftune::set_compute_threads(n); }, "threads"_a);
  m.def("threads", [] { return ftune::compute_threads(); });
  m.def("cpu_matmul", [] { return ftune::cpu::matmul_description(); });
  m.def("config_values", &config_values, "config"_a, "is_path"_a, "overrides"_a,
        "Every config key's value in the config train() would run (presets and defaults "
        "resolved), as YAML writes it");
  m.def("config_keys", [] {
    std::vector<std::string> keys;
    for (const ftune::ConfigKey& k : ftune::config_keys()) keys.push_back(k.key);
    return keys;
  });
  // Rows given in memory, registered under "memory:NAME" while the object lives
  // (data/memory_source.h); the Python layer makes them from dicts and DataFrames.
  nb::class_<ftune::data::MemorySource>(m, "MemorySource")
      .def(nb::init<const std::string&, std::string>(), "name"_a, "text"_a)
      .def_prop_ro("path", &ftune::data::MemorySource::path)
      .def("release", &ftune::data::MemorySource::release);
  bind_hpo(m);
  bind_causal_lm(m);
  m.def("train", &train, "config"_a, "is_path"_a, "overrides"_a, "resume"_a, "on_eval"_a.none(),
        "on_log"_a.none());
}
