// A closed set of words naming an enum's values — a config key's choices ("auto, on or off"), a
// flag's — declared once next to the enum as a ChoiceNames array and found by argument-dependent
// lookup (`choice_names(E{})`). The config key table reads and validates a choice key with it
// once, when the YAML is read (train/config_keys.cc), so the code that uses the value switches on
// the enum and never compares words; messages and docs take the words from the same array.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ftune {

template <typename E>
struct ChoiceName {
  E value;
  std::string_view name;
};
template <typename E, size_t N>
using ChoiceNames = std::array<ChoiceName<E>, N>;

// The word for `value` ("?" for a value the array leaves out, which a caller never passes).
template <typename E, size_t N>
constexpr std::string_view choice_name(const ChoiceNames<E, N>& names, E value) {
  for (const ChoiceName<E>& c : names)
    if (c.value == value) return c.name;
  return "?";
}
// The value `word` names, exactly (case and all); nullopt for any other word.
template <typename E, size_t N>
constexpr std::optional<E> find_choice(const ChoiceNames<E, N>& names, std::string_view word) {
  for (const ChoiceName<E>& c : names)
    if (c.name == word) return c.value;
  return std::nullopt;
}
// The words in declaration order.
template <typename E, size_t N>
std::vector<std::string> choice_words(const ChoiceNames<E, N>& names) {
  std::vector<std::string> out;
  for (const ChoiceName<E>& c : names) out.emplace_back(c.name);
  return out;
}
// Throws InputError "<where> must be one of a, b, c, got 'x'" with the did_you_mean hint.
[[noreturn]] void throw_not_a_choice(const std::string& where, std::string_view word,
                                     const std::vector<std::string>& words);
// The value of enum E (its array found by ADL) that `word` names; else the error above.
template <typename E>
E parse_choice(std::string_view word, const std::string& where) {
  if (std::optional<E> value = find_choice(choice_names(E{}), word)) return *value;
  throw_not_a_choice(where, word, choice_words(choice_names(E{})));
}
// The word of an enum whose array ADL finds (`constexpr const auto& choice_names(E)`).
template <typename E>
std::string_view choice_name(E value) {
  return choice_name(choice_names(E{}), value);
}

// "a, b or c" (one word alone; "a or b").
std::string either(const std::vector<std::string>& words);
// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);
// The word of `words` closest to `typed` within `max_edits` edits (the first of equals), or "".
std::string closest_word(std::string_view typed, const std::vector<std::string>& words,
                         size_t max_edits);
// " (did you mean 'on'?)" when a word of `words` is within 2 edits of `typed` and not equal to
// it, else "": appended to a message that refuses `typed`.
std::string did_you_mean(std::string_view typed, const std::vector<std::string>& words);

// The switch of a setting that a run resolves for its device: auto (the run decides), on or off.
// training.tf32, training.cuda_graphs, data.packing.
enum class Switch { Auto, On, Off };
constexpr ChoiceNames<Switch, 3> kSwitchNames{
    {{Switch::Auto, "auto"}, {Switch::On, "on"}, {Switch::Off, "off"}}};
constexpr const ChoiceNames<Switch, 3>& choice_names(Switch) {
  return kSwitchNames;
}

}  // namespace ftune
