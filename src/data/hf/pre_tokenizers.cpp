// The pre-tokenizers; see pre_tokenizers.h.
#include "pre_tokenizers.h"

#include <vector>

#include "byte_level.h"
#include "prepend_scheme.h"
#include "unicode_props.h"
#include "unicode_regex.h"
#include "utf8.h"

namespace fsdp::data::hf {

namespace {

// Spans of the characters for which `is` holds, each its own match.
template <typename Predicate>
std::vector<Span> char_spans(const std::string& text, Predicate is) {
  std::vector<std::pair<size_t, size_t>> matches;
  for (size_t i = 0; i < text.size();) {
    const int n = utf8_sequence_length(text, i);
    const size_t len = size_t(n > 0 ? n : 1);
    if (n > 0 && is(decode_utf8(text, i, n))) matches.push_back({i, i + len});
    i += len;
  }
  return spans_of(matches, text.size());
}

class Split final : public PreTokenizer {
 public:
  Split(UnicodeRegex re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Pieces& pieces) const override {
    split_text_pieces(pieces, [&](Piece&& p, Pieces& out) {
      std::vector<Span> spans = spans_of(re_.find_all(p.text), p.text.size());
      if (invert_)
        for (Span& s : spans) s.match = !s.match;
      apply_split(std::move(p), spans, behavior_, out);
    });
  }

 private:
  UnicodeRegex re_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_) re_ = std::make_unique<UnicodeRegex>(kGpt2Pattern);
  }
  void pre_tokenize(Pieces& pieces) const override {
    split_text_pieces(pieces, [&](Piece&& p, Pieces& out) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (!use_regex_) {
        out.push_back(std::move(p));
        return;
      }
      const auto spans = spans_of(re_->find_all(p.text), p.text.size());
      apply_split(std::move(p), spans, SplitBehavior::Isolated, out);
    });
    for (Piece& p : pieces)
      if (p.id < 0) p.text = bytes_to_chars(p.text);
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<UnicodeRegex> re_;
};


class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void pre_tokenize(Pieces& pieces) const override {
    split_text_pieces(pieces, [&](Piece&& p, Pieces& out) {
      std::string t;
      t.reserve(p.text.size() + 3);
      for (char c : p.text) {
        if (c == ' ') t += replacement_;
        else t += c;
      }
      const bool starts = t.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (prepend_ == Prepend::Always || (prepend_ == Prepend::First && p.at_start))) {
        t.insert(0, replacement_);
      }
      p.text = std::move(t);
      if (!split_) {
        out.push_back(std::move(p));
        return;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t i = p.text.find(replacement_); i != std::string::npos; i = p.text.find(replacement_, i + 1)) {
        matches.push_back({i, i + replacement_.size()});
        i += replacement_.size() - 1;
      }
      apply_split(std::move(p), spans_of(matches, p.text.size()), SplitBehavior::MergedWithNext, out);
    });
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void pre_tokenize(Pieces& pieces) const override {
    split_text_pieces(pieces, [&](Piece&& p, Pieces& out) {
      const auto spans = char_spans(p.text, is_numeric);
      apply_split(std::move(p), spans, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous, out);
    });
  }

 private:
  bool individual_;
};

// WhitespaceSplit: split on whitespace, which goes.
class WhitespaceSplit final : public PreTokenizer {
 public:
  void pre_tokenize(Pieces& pieces) const override {
    split_text_pieces(pieces, [&](Piece&& p, Pieces& out) {
      const auto spans = char_spans(p.text, is_white_space);
      apply_split(std::move(p), spans, SplitBehavior::Removed, out);
    });
  }
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(Pieces& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::string single_char(const JsonNode& node) {
  const std::string s = node.string();
  if (s.empty() || utf8_length(s) != 1) node.fail("expected one character");
  return s;
}

}  // namespace

SplitBehavior split_behavior(const JsonNode& node) {
  const std::string b = node.string();
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  node.unsupported(b);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "Split")
    return std::make_unique<Split>(regex_of(node.at("pattern")), split_behavior(node.at("behavior")),
                                   node.at("invert").boolean());
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(node.boolean_or("add_prefix_space", true), node.boolean_or("use_regex", true));
  if (type == "Metaspace")
    return std::make_unique<Metaspace>(single_char(node.at("replacement")), prepend_scheme(node),
                                       node.boolean_or("split", true));
  if (type == "Digits") return std::make_unique<Digits>(node.boolean_or("individual_digits", false));
  // Whitespace: \w+|[^\w\s]+ kept, the rest removed (a Split on that pattern, inverted).
  if (type == "Whitespace") return std::make_unique<Split>(UnicodeRegex(R"(\w+|[^\w\s]+)"), SplitBehavior::Removed, true);
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Sequence") {
    const JsonNode list = node.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_pre_tokenizer(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.at("type").unsupported(type);
}

}  // namespace fsdp::data::hf
