// PCRE2 for tokenizer.json's patterns; see unicode_regex.h.
#include "unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <stdexcept>

#include "utf8.h"

namespace fsdp::data::hf {

namespace {

// Unicode White_Space (PropList.txt), as a class body.
constexpr const char* kWhiteSpace = R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr const char* kWord = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

}  // namespace

std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;  // inside [...] (POSIX classes [:alpha:] nest one level)
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const bool in_class = class_depth > 0;
      if (e == 's' || e == 'w') {
        const char* body = e == 's' ? kWhiteSpace : kWord;
        out += in_class ? std::string(body) : "[" + std::string(body) + "]";
        ++i;
        continue;
      }
      if (e == 'S' || e == 'W') {
        if (in_class) {
          throw std::invalid_argument(std::string("\\") + e + " inside a character class is not supported");
        }
        out += "[^" + std::string(e == 'S' ? kWhiteSpace : kWord) + "]";
        ++i;
        continue;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (c == '[') {
      // "[:alpha:]" inside a class is a POSIX class, not a nested one.
      if (class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
        const size_t end = p.find(":]", i + 2);
        if (end != std::string::npos) {
          out.append(p, i, end + 2 - i);
          i = end + 1;
          continue;
        }
      }
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both dialects.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

std::string escape_regex(std::string_view literal) {
  // Every ASCII character that is not a letter or a digit gets a backslash (a literal in
  // PCRE2 whatever it is); the rewrite above leaves such pairs alone.
  std::string out;
  out.reserve(literal.size() * 2);
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

UnicodeRegex regex_of(const JsonNode& node) {
  try {
    if (const auto s = node.get("String")) return UnicodeRegex(escape_regex(s->string()));
    if (const auto r = node.get("Regex")) return UnicodeRegex(r->string());
  } catch (const std::invalid_argument& e) {
    node.fail(std::string("not a pattern this tokenizer can run: ") + e.what());
  }
  node.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

struct UnicodeRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

UnicodeRegex::UnicodeRegex(const std::string& onig_pattern)
    : pattern_(onig_pattern), impl_(std::make_unique<Impl>()) {
  const std::string pcre = onig_to_pcre2(onig_pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(), PCRE2_UTF | PCRE2_UCP, &error,
                              &offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument(std::string(reinterpret_cast<const char*>(message)) + " at offset " +
                                std::to_string(offset));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // the interpreter is the fallback
}

UnicodeRegex::~UnicodeRegex() = default;
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;

namespace {

// One match-data block per thread and pattern size: prepare's workers encode concurrently.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

std::pair<size_t, size_t> UnicodeRegex::find(std::string_view text, size_t from) const {
  pcre2_match_data* md = thread_match_data();
  // The text is valid UTF-8 (the pipeline replaced anything else): skip PCRE2's check.
  const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                             PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc < 0) {
    if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, std::string_view::npos};
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw std::runtime_error("regex '" + pattern_ + "': " + reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  return {size_t(ov[0]), size_t(ov[1])};
}

std::vector<std::pair<size_t, size_t>> UnicodeRegex::find_all(std::string_view text) const {
  // Oniguruma's (and Rust regex's) iteration: an empty match right where the previous match
  // ended is skipped by moving one character on, so nothing matches twice.
  std::vector<std::pair<size_t, size_t>> out;
  size_t from = 0, last_end = std::string_view::npos;
  while (from <= text.size()) {
    const auto m = find(text, from);
    if (m.first == std::string_view::npos) break;
    if (m.first == m.second && m.second == last_end) {
      if (from >= text.size()) break;
      const int n = utf8_sequence_length(text, from);
      from += size_t(n > 0 ? n : 1);
      continue;
    }
    out.push_back(m);
    from = last_end = m.second;
  }
  return out;
}

}  // namespace fsdp::data::hf
