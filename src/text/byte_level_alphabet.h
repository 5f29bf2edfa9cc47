// GPT-2's byte-to-character table: every byte maps to a printable character, so that a byte-level
// BPE vocabulary is made of ordinary strings. Printable Latin-1 bytes (! .. ~, ¡ .. ¬, ® .. ÿ)
// map to themselves; the other 68 bytes map to U+0100 + n in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ftune::text {

// UTF-8 encoding of the character that stands for byte b.
const std::array<std::string, 256>& byte_level_chars();
// The byte that character c stands for, or -1 when c is not in the table.
int byte_level_byte(char32_t c);

}  // namespace ftune::text
