// PreTokenized: the initial span (see pretokenized.h).
#include "text/pretokenized.h"

#include "text/utf8.h"

namespace ftune::text {

void PreTokenized::reset(std::string_view input) {
  text.assign(input);
  spans.clear();
  if (input.empty()) return;
  const auto first_char = static_cast<uint32_t>(utf8_len(static_cast<unsigned char>(input[0])));
  spans.push_back(Span{0, static_cast<uint32_t>(input.size()), -1, first_char, true});
}

}  // namespace ftune::text
