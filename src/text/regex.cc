// PCRE2-backed regular expressions with Oniguruma semantics (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include <cctype>
#include <cstring>

#include "core/error.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

// Oniguruma's \w (probed from HF's build): Alphabetic, Mark, Nd, Pc and the Latin-1 superscript
// digits and vulgar fractions.
constexpr const char* kOnigWordBody =
    R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Per-thread JIT stack and match data, so matching allocates nothing in the hot path.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

std::string onig_to_pcre2(std::string_view p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;  // inside [...] (Oniguruma allows nested classes)
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's':
          out += "\\p{White_Space}";
          break;
        case 'S':
          out += "\\P{White_Space}";
          break;
        case 'd':
          out += "\\p{Nd}";
          break;
        case 'D':
          out += "\\P{Nd}";
          break;
        case 'w':
          out += in_class ? std::string(kOnigWordBody) : "[" + std::string(kOnigWordBody) + "]";
          break;
        case 'W':
          if (in_class)
            throw InputError(where +
                             ": regex construct \\W inside a character class is not supported");
          out += "[^" + std::string(kOnigWordBody) + "]";
          break;
        case 'h':
          out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
          break;
        case 'H':
          if (in_class)
            throw InputError(where +
                             ": regex construct \\H inside a character class is not supported");
          out += "[^0-9a-fA-F]";
          break;
        case 'b':
        case 'B':
          if (in_class) {  // [\b] is a backspace
            out += "\\x{08}";
          } else {
            // Word boundaries with Oniguruma's word class (PCRE2's differs for marks and digits).
            const std::string w = "[" + std::string(kOnigWordBody) + "]";
            out += e == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                            : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
          }
          break;
        case 'u':
          if (i + 5 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
              is_hex(p[i + 5])) {
            out += "\\x{";
            out.append(p.substr(i + 2, 4));
            out += "}";
            i += 4;
          } else {
            out += "\\u";
          }
          break;
        default:
          out += c;
          out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
      // POSIX bracket inside a class: Oniguruma's Unicode definitions.
      static const std::pair<const char*, const char*> kPosix[] = {
          {"[:alpha:]", "\\p{Alphabetic}"},
          {"[:digit:]", "\\p{Nd}"},
          {"[:alnum:]", "\\p{Alphabetic}\\p{Nd}"},
          {"[:space:]", "\\p{White_Space}"},
          {"[:upper:]", "\\p{Uppercase}"},
          {"[:lower:]", "\\p{Lowercase}"},
          {"[:word:]", kOnigWordBody}};
      bool replaced = false;
      for (const auto& [name, body] : kPosix) {
        if (p.compare(i, std::strlen(name), name) == 0) {
          out += body;
          i += std::strlen(name) - 1;
          replaced = true;
          break;
        }
      }
      if (replaced) continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both engines.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out += '^';
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) {
      --class_depth;
      out += c;
      continue;
    }
    if (c == '(' && class_depth == 0 && i + 2 < p.size() && p[i + 1] == '?') {
      // Inline option groups: Ruby's m (dot matches newline) is PCRE2's s.
      size_t j = i + 2;
      std::string flags;
      while (j < p.size() && (std::isalpha(static_cast<unsigned char>(p[j])) || p[j] == '-')) {
        flags += p[j] == 'm' ? 's' : p[j];
        ++j;
      }
      if (!flags.empty() && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        out += "(?" + flags;
        i = j - 1;
        continue;
      }
    }
    out += c;
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view onig_pattern, const std::string& where) {
  translated_ = onig_to_pcre2(onig_pattern, where);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(translated_.data()), translated_.size(),
      PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw InputError(fmt::format(
        "{}: invalid regex \"{}\": {} (at offset {} of the translated pattern \"{}\")", where,
        onig_pattern, reinterpret_cast<const char*>(message), offset, translated_));
  }
  compiled_ = std::make_unique<Compiled>();
  compiled_->code = code;
  compiled_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex Regex::literal(std::string_view literal) {
  if (literal.empty()) return Regex("", "empty literal pattern");  // matches the empty string
  Regex r;
  r.literal_ = std::string(literal);
  r.translated_ = "\\Q" + r.literal_ + "\\E";
  return r;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text, std::vector<Match>& out) const {
  if (!literal_.empty()) {
    // Leftmost non-overlapping occurrences, like the escaped regex.
    size_t pos = 0;
    while (pos <= text.size()) {
      const size_t at = text.find(literal_, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(static_cast<uint32_t>(at), static_cast<uint32_t>(at + literal_.size()));
      pos = at + literal_.size();
    }
    return;
  }
  MatchScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t last_end = 0;
  bool skip_next_empty = false;
  while (last_end <= n) {
    int rc;
    if (compiled_->jit) {
      rc = pcre2_jit_match(compiled_->code, subject, n, last_end, 0, s.data, s.context);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // fall back to the interpreter
        rc = pcre2_match(compiled_->code, subject, n, last_end, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK,
                         s.data, nullptr);
    } else {
      rc = pcre2_match(compiled_->code, subject, n, last_end, PCRE2_NO_UTF_CHECK, s.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(fmt::format("regex \"{}\" failed on a {}-byte input: {}", translated_, n,
                              reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t start = ov[0], end = ov[1];
    last_end = end;
    if (start == end) {
      // Empty match: step over one character; drop it if it directly follows a match.
      last_end += end < n ? utf8_len(static_cast<unsigned char>(text[end])) : 1;
      if (skip_next_empty) {
        skip_next_empty = false;
        continue;
      }
    } else {
      skip_next_empty = true;
    }
    out.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(end));
  }
}

Regex make_pattern(const JsonNode& pattern) {
  if (auto s = pattern.get("String")) return Regex::literal(s->as_string());
  if (auto r = pattern.get("Regex")) return Regex(r->as_string(), r->path());
  pattern.fail("an object {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace ftune::text
