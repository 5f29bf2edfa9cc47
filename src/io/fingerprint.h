// Content fingerprints (XXH3-128 over the bytes) of files and of the files of a directory. A
// resumed run compares them with the ones its checkpoint recorded, so a changed model, tokenizer
// or dataset is refused instead of silently mixed into a run.
#pragma once

#include <string>
#include <vector>

namespace ftune::io {

// 32 hex digits; InputError naming the file when it cannot be read.
std::string file_fingerprint(const std::string& path);

// One fingerprint over the named files of `dir` that exist (name and content of each).
std::string directory_fingerprint(const std::string& dir, const std::vector<std::string>& names);

// Fingerprint of a string (e.g. a canonical configuration section).
std::string text_fingerprint(const std::string& text);

}  // namespace ftune::io
