// Fuzzes the tokenizer.json loader: any bytes must either load or raise ftune::Error (a clear
// InputError), never crash, hang or leak; a file that loads must encode and decode text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = ftune::text::Tokenizer::from_json(json);
    for (std::string_view text :
         {std::string_view("Hello, world! It's 2024."), std::string_view(" a  b\tc\n"),
          std::string_view("\xC3\xA9t\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80"),
          json.substr(0, 64)}) {
      const auto e = tok.encode(text, std::string_view("pair"));
      (void)tok.decode(e.ids, false);
      (void)tok.decode(e.ids, true);
    }
  } catch (const ftune::Error&) {
    // Rejected with a message: fine.
  }
  return 0;
}
