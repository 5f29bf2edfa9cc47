// ftune._ftune's causal-LM part: a *ForCausalLM directory loaded for scoring candidate
// completions (models/causal_lm_scoring.h), as `ftune predict --candidates` scores them: each
// candidate's log p(candidate | prompt) summed over its tokens, no EOS, a prompt's candidates in
// one padded batch. The model is planned for the longest prompt + candidate and the most
// candidates seen so far and planned again only when a call needs more; calls on one model run one at a time, with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/arena.h"
#include "core/device.h"
#include "core/error.h"
#include "data/completions.h"
#include "models/causal_lm_scoring.h"
#include "models/hf_checkpoint.h"
#include "text/tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

ftune::LoadOptions causal_lm_load() {
  ftune::LoadOptions o;
  o.causal_lm = true;  // a family without an LM head is refused, named
  return o;
}

class CausalLm {
 public:
  CausalLm(const std::string& dir, const std::string& device)
      : dir_(dir),
        spec_(ftune::load_model_spec(dir, causal_lm_load())),
        tokenizer_(ftune::text::Tokenizer::from_dir(dir)),
        device_(ftune::usable_device(device, "device")) {}

  // Per prompt, one log-likelihood per candidate of its list.
  std::vector<std::vector<double>> log_likelihoods(
      const std::vector<std::string>& prompts,
      const std::vector<std::vector<std::string>>& candidates, bool special_tokens) {
    if (prompts.size() != candidates.size())
      throw ftune::InputError("give one list of candidates per prompt");
    std::vector<std::vector<double>> out;
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t longest = 1, most = 1;
    for (size_t i = 0; i < prompts.size(); ++i) {
      most = std::max<int64_t>(most, static_cast<int64_t>(candidates[i].size()));
      if (candidates[i].empty())
        throw ftune::InputError("prompt " + std::to_string(i + 1) + " has no candidate");
      for (const std::string& c : candidates[i]) {
        if (c.empty())
          throw ftune::InputError("prompt " + std::to_string(i + 1) + ": an empty candidate");
        longest = std::max<int64_t>(
            longest, ftune::data::tokenize_completion(tokenizer_, {prompts[i], c, 0}, -1, 0,
                                                      "prompt " + std::to_string(i + 1),
                                                      {special_tokens, false})
                         .input_ids.size());
      }
    }
    if (longest > spec_.info().max_tokens)
      throw ftune::InputError("a prompt with a candidate takes " + std::to_string(longest) +
                              " tokens; " + dir_ + " has " +
                              std::to_string(spec_.info().max_tokens) + " positions");
    ensure_planned(longest, most);
    for (size_t i = 0; i < prompts.size(); ++i)
      out.push_back(ftune::completion_log_likelihoods(*model_, tokenizer_, prompts[i],
                                                      candidates[i], -1, special_tokens));
    return out;
  }

  std::string architecture() const { return spec_.info().architecture; }
  int64_t max_length() const { return spec_.info().max_tokens; }

 private:
  // A prompt's candidates are one padded batch: planned for the most candidates and the longest
  // row seen so far, planned again only when a call needs more.
  void ensure_planned(int64_t longest, int64_t rows) {
    if (model_ && longest <= planned_ && rows <= planned_rows_) return;
    longest = std::max(longest, planned_);
    rows = std::max(rows, planned_rows_);
    model_.reset();
    arena_.reset();
    ftune::ClassifierOptions o;
    o.max_batch = rows;
    o.max_seq = longest;
    o.training = false;
    o.device = device_;
    auto model = std::make_unique<ftune::SequenceClassifier>(spec_, o);
    ftune::ArenaPlan plan;
    model->add_to_plan(plan);
    arena_ = std::make_unique<ftune::Arena>(device_, std::move(plan));
    model->bind(*arena_);
    ftune::load_model_weights(*model, dir_, causal_lm_load());
    model_ = std::move(model);
    planned_ = longest;
    planned_rows_ = rows;
  }

  std::string dir_;
  ftune::ModelSpec spec_;
  ftune::text::Tokenizer tokenizer_;
  ftune::Device device_;
  std::unique_ptr<ftune::Arena> arena_;  // declared before the model: it outlives it
  std::unique_ptr<ftune::SequenceClassifier> model_;
  int64_t planned_ = 0, planned_rows_ = 0;
  std::mutex mutex_;
};

}  // namespace

void bind_causal_lm(nb::module_& m) {
  nb::class_<CausalLm>(m, "CausalLm")
      .def(nb::init<const std::string&, const std::string&>(), "model_dir"_a, "device"_a = "cpu")
      .def("log_likelihoods", &CausalLm::log_likelihoods, "prompts"_a, "candidates"_a,
           "special_tokens"_a = true)
      .def_prop_ro("architecture", &CausalLm::architecture)
      .def_prop_ro("max_length", &CausalLm::max_length);
}
