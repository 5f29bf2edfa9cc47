// Truncation and padding of encodings, as HF's truncate_encodings / pad_encodings do them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/tokenizer.h"

namespace ftune::text {

// Shortens the token sequences `first` and `pair` (may be null) to at most `max_length` tokens in
// total (special tokens already excluded from max_length by the caller). longest_first removes
// from the longer sequence (splitting the budget evenly when both are long); only_first /
// only_second remove from one sequence and raise InputError when it is too short (HF: "Sequence
// to truncate too short to respect the provided max_length") or, for only_second, when there is
// no pair. Side::kRight keeps the first tokens, kLeft the last ones.
void truncate_sequences(std::vector<uint32_t>& first, std::vector<uint32_t>* pair,
                        size_t max_length, Truncation strategy, Side direction);

// Pads `e` to `length` tokens with pad_id / pad_type_id, attention 0 and special-token mask 1.
void pad_encoding(Encoding& e, size_t length, uint32_t pad_id, uint32_t pad_type_id, Side side);

}  // namespace ftune::text
