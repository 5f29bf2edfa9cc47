// Truncation (HF utils/truncation.rs) and padding (utils/padding.rs) of encodings.
#include "text/truncation.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ftune::text {

namespace {

template <class T>
void keep(std::vector<T>& v, size_t n, Side direction) {
  if (v.size() <= n) return;
  if (direction == Side::kRight)
    v.resize(n);
  else
    v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(n));
}

}  // namespace

void truncate_sequences(std::vector<uint32_t>& first, std::vector<uint32_t>* pair,
                        size_t max_length, Truncation strategy, Side direction) {
  if (strategy == Truncation::kNone) return;
  if (max_length == 0) {
    first.clear();
    if (pair) pair->clear();
    return;
  }
  const size_t total = first.size() + (pair ? pair->size() : 0);
  if (total <= max_length) return;
  const size_t to_remove = total - max_length;
  if (strategy == Truncation::kLongestFirst) {
    if (!pair) {
      keep(first, total - to_remove, direction);
      return;
    }
    size_t n1 = first.size(), n2 = pair->size();
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    if (n1 > max_length)
      n2 = n1;
    else
      n2 = std::max(n1, max_length - n1);
    if (n1 + n2 > max_length) {
      n1 = max_length / 2;
      n2 = n1 + max_length % 2;
    }
    if (swap) std::swap(n1, n2);
    keep(first, n1, direction);
    keep(*pair, n2, direction);
    return;
  }
  std::vector<uint32_t>* target = strategy == Truncation::kOnlyFirst ? &first : pair;
  if (!target) throw InputError("truncation only_second: the input has no second sequence");
  if (target->size() <= to_remove)
    throw InputError(
        "truncation " +
        std::string(strategy == Truncation::kOnlyFirst ? "only_first" : "only_second") +
        ": the sequence to truncate is too short to respect max_length " +
        std::to_string(max_length));
  keep(*target, target->size() - to_remove, direction);
}

void pad_encoding(Encoding& e, size_t length, uint32_t pad_id, uint32_t pad_type_id, Side side) {
  if (e.size() >= length) return;
  const size_t n = length - e.size();
  auto pad = [&](auto& v, auto value) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    if (side == Side::kRight)
      v.insert(v.end(), n, static_cast<T>(value));
    else
      v.insert(v.begin(), n, static_cast<T>(value));
  };
  pad(e.ids, pad_id);
  pad(e.type_ids, pad_type_id);
  pad(e.attention_mask, 0);
  pad(e.special_tokens_mask, 1);
}

}  // namespace ftune::text
