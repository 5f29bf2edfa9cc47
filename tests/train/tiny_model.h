// A tiny randomly initialised BERT classifier directory (config.json, model.safetensors and the
// MiniLM WordPiece tokenizer files) for fast end-to-end training tests.
#pragma once

#include <string>

namespace ftune::test {

// Writes the model into `dir`; hidden 32, 2 layers, 4 heads, the 30522-token uncased vocabulary.
void write_tiny_bert(const std::string& dir, int num_labels = 2);

}  // namespace ftune::test
