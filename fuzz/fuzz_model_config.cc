// Fuzzes config.json parsing (models/bert/encoder_config.h) with any bytes: they parse into an
// EncoderConfig or raise InputError, never crash, hang or throw anything else. A config that
// parses must survive its own round trip (to_json, as saving writes it, read back to the same
// sizes and labels), and its parameter table (what planning sizes memory from) must be buildable
// without overflow.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "fuzz_files.h"
#include "io/json_file.h"
#include "models/bert/classification_head.h"
#include "models/bert/encoder.h"
#include "models/bert/encoder_config.h"
#include "models/param_table.h"

namespace {

using namespace ftune;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_model_config: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_error([&] {
    const EncoderConfig c =
        EncoderConfig::from_json(io::parse_json(text, "config.json"), "config.json");
    const EncoderConfig again = EncoderConfig::from_json(c.to_json(), "saved config.json");
    check(again.variant == c.variant && again.vocab_size == c.vocab_size &&
              again.hidden_size == c.hidden_size && again.num_layers == c.num_layers &&
              again.num_heads == c.num_heads && again.id2label == c.id2label,
          "config.json does not survive its round trip");
    ParamTable params;
    add_encoder_params(c, params);
    add_head_params(c, params);
    (void)params.total();
  });
  return 0;
}
