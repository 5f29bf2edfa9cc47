// Decoders turn token strings back into text (tokenizer.json "decoder"): ByteLevel, WordPiece,
// Metaspace, BPEDecoder, ByteFallback, Fuse, Strip, Replace, CTC and Sequence, each a step of
// HF's decode_chain over the list of token strings.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/json_node.h"

namespace ftune::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const JsonNode& node);

}  // namespace ftune::text
