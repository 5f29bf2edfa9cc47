// Typed YAML configuration with unknown-key detection (see train_config.h).
#include "train/train_config.h"

#include <fmt/format.h>

#include <functional>
#include <set>

#include "core/error.h"

namespace ftune {
namespace {

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

struct Field {
  std::string key;       // dotted path
  const char* expected;  // for messages
  std::function<void(const YAML::Node&, const std::string& where)> read;
};

template <typename T>
std::function<void(const YAML::Node&, const std::string&)> scalar(T* dst, const char* expected) {
  return [dst, expected](const YAML::Node& n, const std::string& where) {
    if (!n.IsScalar()) throw InputError(fmt::format("{} must be {}", where, expected));
    try {
      *dst = n.as<T>();
    } catch (const YAML::Exception&) {
      throw InputError(fmt::format("{} must be {}, got '{}'", where, expected, n.Scalar()));
    }
  };
}

template <typename T>
std::function<void(const YAML::Node&, const std::string&)> list(std::vector<T>* dst,
                                                                const char* expected) {
  return [dst, expected](const YAML::Node& n, const std::string& where) {
    if (!n.IsSequence()) throw InputError(fmt::format("{} must be a list of {}", where, expected));
    dst->clear();
    for (const auto& item : n) {
      try {
        dst->push_back(item.as<T>());
      } catch (const YAML::Exception&) {
        throw InputError(fmt::format("{} must be a list of {}", where, expected));
      }
    }
  };
}

std::vector<Field> schema(TrainConfig& c) {
  auto& t = c.training;
  return {
      {"model.path", "a path", scalar(&c.model.path, "a path")},
      {"model.labels", "a list of label names", list(&c.model.labels, "strings")},
      {"data.train", "a path", scalar(&c.data.train, "a path")},
      {"data.validation", "a path", scalar(&c.data.validation, "a path")},
      {"data.test", "a path", scalar(&c.data.test, "a path")},
      {"data.text_field", "a string", scalar(&c.data.text_field, "a string")},
      {"data.text_pair_field", "a string", scalar(&c.data.text_pair_field, "a string")},
      {"data.label_field", "a string", scalar(&c.data.label_field, "a string")},
      {"data.max_length", "an integer", scalar(&c.data.max_length, "an integer")},
      {"training.epochs", "an integer", scalar(&t.epochs, "an integer")},
      {"training.max_steps", "an integer", scalar(&t.max_steps, "an integer")},
      {"training.batch_size", "an integer", scalar(&t.batch_size, "an integer")},
      {"training.learning_rate", "a number", scalar(&t.learning_rate, "a number")},
      {"training.weight_decay", "a number", scalar(&t.weight_decay, "a number")},
      {"training.adam_beta1", "a number", scalar(&t.adam_beta1, "a number")},
      {"training.adam_beta2", "a number", scalar(&t.adam_beta2, "a number")},
      {"training.adam_epsilon", "a number", scalar(&t.adam_epsilon, "a number")},
      {"training.warmup_ratio", "a number", scalar(&t.warmup_ratio, "a number")},
      {"training.schedule", "linear, cosine or constant",
       scalar(&t.schedule, "linear, cosine or constant")},
      {"training.max_grad_norm", "a number", scalar(&t.max_grad_norm, "a number")},
      {"training.label_smoothing", "a number", scalar(&t.label_smoothing, "a number")},
      {"training.class_weights", "a list of numbers", list(&t.class_weights, "numbers")},
      {"training.seed", "a non-negative integer", scalar(&t.seed, "a non-negative integer")},
      {"training.eval_every", "an integer", scalar(&t.eval_every, "an integer")},
      {"training.log_every", "an integer", scalar(&t.log_every, "an integer")},
      {"training.threads", "an integer", scalar(&t.threads, "an integer")},
      {"output.dir", "a path", scalar(&c.output.dir, "a path")},
  };
}

// Collects every leaf key path of a YAML mapping ("a.b.c"); a key given twice in one mapping is
// an error (YAML parsers silently keep one of them).
void leaf_keys(const YAML::Node& n, const std::string& prefix, std::vector<std::string>& out,
               const std::string& name) {
  if (!n.IsMap()) {
    out.push_back(prefix);
    return;
  }
  std::set<std::string> seen;
  for (const auto& kv : n) {
    const std::string key =
        prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>();
    if (!seen.insert(key).second)
      throw InputError(
          fmt::format("{}:{}: key '{}' is given twice", name, kv.first.Mark().line + 1, key));
    leaf_keys(kv.second, key, out, name);
  }
}

YAML::Node find(const YAML::Node& root, const std::string& dotted) {
  YAML::Node n = YAML::Clone(root);
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string part =
        dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!n.IsMap() || !n[part]) return YAML::Node(YAML::NodeType::Undefined);
    n = n[part];
    if (dot == std::string::npos) return n;
    start = dot + 1;
  }
}

void set_dotted(YAML::Node root, const std::string& dotted, const YAML::Node& value) {
  const size_t dot = dotted.find('.');
  if (dot == std::string::npos) {
    root[dotted] = value;
    return;
  }
  YAML::Node child = root[dotted.substr(0, dot)];
  if (!child.IsMap()) {
    child = YAML::Node(YAML::NodeType::Map);
    root[dotted.substr(0, dot)] = child;
  }
  set_dotted(child, dotted.substr(dot + 1), value);
}

}  // namespace

TrainConfig TrainConfig::parse(const YAML::Node& root_in, const std::string& name) {
  TrainConfig c;
  const YAML::Node root = root_in.IsNull() ? YAML::Node(YAML::NodeType::Map) : root_in;
  if (!root.IsMap())
    throw InputError(
        fmt::format("{}: expected a mapping of sections (model, data, training, output)", name));
  std::vector<Field> fields = schema(c);
  std::set<std::string> known;
  for (const Field& f : fields) known.insert(f.key);
  std::vector<std::string> keys;
  leaf_keys(root, "", keys, name);
  for (const std::string& k : keys) {
    if (known.count(k)) continue;
    std::string best;
    size_t best_d = 4;
    for (const std::string& cand : known)
      if (size_t d = edit_distance(k, cand); d < best_d) best_d = d, best = cand;
    throw InputError(fmt::format("{}: unknown key '{}'{}", name, k,
                                 best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best)));
  }
  for (const Field& f : fields)
    if (const YAML::Node n = find(root, f.key); n.IsDefined() && !n.IsNull())
      f.read(n, fmt::format("{}: key '{}'", name, f.key));

  auto require = [&](bool ok, const std::string& key, const std::string& what) {
    if (!ok) throw InputError(fmt::format("{}: key '{}' {}", name, key, what));
  };
  require(!c.model.path.empty(), "model.path", "is required (a Hugging Face model directory)");
  require(!c.data.train.empty(), "data.train", "is required (a JSONL file)");
  require(c.data.max_length >= 2, "data.max_length", "must be at least 2");
  require(c.training.epochs >= 1 || c.training.max_steps > 0, "training.epochs",
          "must be at least 1");
  require(c.training.max_steps >= 0, "training.max_steps", "must be >= 0");
  require(c.training.batch_size >= 1, "training.batch_size", "must be at least 1");
  require(c.training.learning_rate > 0, "training.learning_rate", "must be positive");
  require(c.training.weight_decay >= 0, "training.weight_decay", "must be >= 0");
  require(c.training.warmup_ratio >= 0 && c.training.warmup_ratio < 1, "training.warmup_ratio",
          "must be in [0, 1)");
  require(c.training.max_grad_norm > 0, "training.max_grad_norm", "must be positive");
  require(c.training.label_smoothing >= 0 && c.training.label_smoothing < 1,
          "training.label_smoothing", "must be in [0, 1)");
  require(c.training.log_every >= 1, "training.log_every", "must be at least 1");
  require(c.training.eval_every >= 0, "training.eval_every", "must be >= 0");
  require(c.training.threads >= 0, "training.threads", "must be >= 0");
  require(c.training.schedule == "linear" || c.training.schedule == "cosine" ||
              c.training.schedule == "constant",
          "training.schedule",
          "must be linear, cosine or constant, got '" + c.training.schedule + "'");
  c.resolved = YAML::Clone(root);
  return c;
}

TrainConfig TrainConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError(fmt::format("{}: cannot open the configuration file", path));
  } catch (const YAML::ParserException& e) {
    throw InputError(
        fmt::format("{}:{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError(fmt::format("override '{}' must look like section.key=value", o));
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw InputError(fmt::format("override '{}': invalid value: {}", o, e.what()));
    }
    set_dotted(root, o.substr(0, eq), value);
  }
  return parse(root, path);
}

}  // namespace ftune
