// The normalizers; see normalizers.h.
#include "normalizers.h"

#include <cstdlib>
#include <vector>

#include <utf8proc.h>

#include "unicode_props.h"
#include "unicode_regex.h"
#include "utf8.h"

namespace fsdp::data::hf {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), utf8proc_ssize_t(text.size()), &out,
                     utf8proc_option_t(options_));
    if (n < 0) return;  // the text is valid UTF-8 by now; leave it as it is rather than lose it
    text.assign(reinterpret_cast<const char*>(out), size_t(n));
    std::free(out);
  }

 private:
  int options_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string s) : s_(std::move(s)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, s_);
  }

 private:
  std::string s_;
};

class Replace final : public Normalizer {
 public:
  Replace(UnicodeRegex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    const auto matches = re_.find_all(text);
    if (matches.empty()) return;
    std::string out;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.append(text, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(text, prev, std::string::npos);
    text = std::move(out);
  }

 private:
  UnicodeRegex re_;
  std::string content_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        const int n = utf8_sequence_length(text, begin);
        if (n == 0 || !is_white_space(decode_utf8(text, begin, n))) break;
        begin += size_t(n);
      }
    }
    if (right_) {
      while (end > begin) {
        size_t s = end - 1;
        while (s > begin && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        const int n = utf8_sequence_length(text, s);
        if (n == 0 || !is_white_space(decode_utf8(text, s, n))) break;
        end = s;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  constexpr int kStable = UTF8PROC_STABLE;
  if (type == "NFC") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Prepend") return std::make_unique<Prepend>(node.at("prepend").string());
  if (type == "Replace") return std::make_unique<Replace>(regex_of(node.at("pattern")), node.at("content").string());
  if (type == "Strip") return std::make_unique<Strip>(node.at("strip_left").boolean(), node.at("strip_right").boolean());
  if (type == "Sequence") {
    const JsonNode list = node.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_normalizer(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.at("type").unsupported(type);
}

}  // namespace fsdp::data::hf
