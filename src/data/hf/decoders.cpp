// The decoders; see decoders.h.
#include "decoders.h"

#include <cctype>

#include "byte_level.h"
#include "prepend_scheme.h"
#include "unicode_regex.h"
#include "utf8.h"

namespace fsdp::data::hf {

namespace {

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      // A token whose every character is in the byte table gives those bytes; any other
      // (an added token such as "<|eot_id|>" is spelled in plain text) gives its own bytes.
      std::string mine;
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        const int n = utf8_sequence_length(t, i);
        const auto b = n > 0 ? char_to_byte(decode_utf8(t, i, n)) : std::nullopt;
        if (!b) all = false;
        else mine += char(*b);
        i += size_t(n > 0 ? n : 1);
      }
      bytes += all ? mine : t;
    }
    tokens.assign(1, to_valid_utf8(bytes));
  }
};


class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, Prepend prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepend_ != Prepend::Never)) out += ' ';
          k += replacement_.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
};

class Replace final : public Decoder {
 public:
  Replace(UnicodeRegex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : re_.find_all(t)) {
        out.append(t, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  UnicodeRegex re_;
  std::string content_;
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      // Valid UTF-8 as one string; otherwise one U+FFFD per byte, as `tokenizers` does.
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        pending += char(std::stoi(t.substr(3, 2), nullptr, 16));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip final : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      // Up to start_ leading and stop_ trailing characters equal to content_ are cut.
      std::vector<size_t> starts;  // byte offset of each character
      for (size_t i = 0; i < t.size();) {
        starts.push_back(i);
        const int n = utf8_sequence_length(t, i);
        i += size_t(n > 0 ? n : 1);
      }
      const size_t chars = starts.size();
      auto char_at = [&](size_t c) {
        const size_t end = c + 1 < chars ? starts[c + 1] : t.size();
        return std::string_view(t).substr(starts[c], end - starts[c]);
      };
      size_t cut_begin = 0;
      for (size_t c = 0; c < std::min(start_, chars) && char_at(c) == content_; ++c) cut_begin = c + 1;
      size_t cut_end = chars;
      for (size_t k = 0; k < stop_ && k < chars && char_at(chars - k - 1) == content_; ++k) cut_end = chars - k - 1;
      if (cut_end < cut_begin) cut_end = cut_begin;
      const size_t b = cut_begin < chars ? starts[cut_begin] : t.size();
      const size_t e = cut_end < chars ? starts[cut_end] : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class BpeDecoder final : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      const std::string with = i + 1 == tokens.size() ? "" : " ";
      for (size_t at = t.find(suffix_); !suffix_.empty() && at != std::string::npos; at = t.find(suffix_, at)) {
        t.replace(at, suffix_.size(), with);
        at += with.size();
      }
    }
  }

 private:
  std::string suffix_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(node.at("replacement").string(), prepend_scheme(node));
  if (type == "Replace") return std::make_unique<Replace>(regex_of(node.at("pattern")), node.at("content").string());
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    const int64_t start = node.at("start").integer(), stop = node.at("stop").integer();
    if (start < 0 || stop < 0) node.fail("start and stop must be >= 0");
    return std::make_unique<Strip>(node.at("content").string(), size_t(start), size_t(stop));
  }
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(node.string_or("suffix", "</w>"));
  if (type == "Sequence") {
    const JsonNode list = node.at("decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_decoder(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.at("type").unsupported(type);
}

std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens) {
  if (decoder == nullptr) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace fsdp::data::hf
