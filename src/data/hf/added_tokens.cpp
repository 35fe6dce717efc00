// Finding added tokens in the text; see added_tokens.h.
#include "added_tokens.h"

#include <algorithm>

#include "unicode_props.h"
#include "utf8.h"

namespace fsdp::data::hf {

namespace {

// The code point that ends text[0, end) and where it starts.
char32_t last_char(std::string_view text, size_t end, size_t* start) {
  size_t s = end - 1;
  while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
  const int n = utf8_sequence_length(text, s);
  *start = s;
  return n > 0 ? decode_utf8(text, s, n) : kReplacementChar;
}

char32_t first_char(std::string_view text, size_t begin, size_t* len) {
  const int n = utf8_sequence_length(text, begin);
  *len = size_t(n > 0 ? n : 1);
  return n > 0 ? decode_utf8(text, begin, n) : kReplacementChar;
}

bool ends_with_word(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t s = 0;
  return is_word_char(last_char(text, end, &s));
}

bool starts_with_word(std::string_view text, size_t begin) {
  if (begin >= text.size()) return false;
  size_t len = 0;
  return is_word_char(first_char(text, begin, &len));
}

// Where the run of whitespace that ends at `end` begins.
size_t whitespace_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    size_t s = 0;
    if (!is_white_space(last_char(text, end, &s))) break;
    end = s;
  }
  return end;
}

// Where the run of whitespace that begins at `begin` ends.
size_t whitespace_run_end(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t len = 0;
    if (!is_white_space(first_char(text, begin, &len))) break;
    begin += len;
  }
  return begin;
}

}  // namespace

void AddedTokens::Trie::add(std::string_view pattern, int32_t token) {
  int32_t at = 0;
  for (unsigned char b : pattern) {
    auto& next = nodes[size_t(at)].next;
    auto it = std::lower_bound(next.begin(), next.end(), b, [](const auto& e, unsigned char v) { return e.first < v; });
    if (it == next.end() || it->first != b) {
      const int32_t child = int32_t(nodes.size());
      it = next.insert(it, {b, child});
      nodes.push_back(Node{});
    }
    at = it->second;
  }
  // Two tokens with the same content: the first one listed (aho-corasick's pattern order).
  if (nodes[size_t(at)].token < 0) nodes[size_t(at)].token = token;
  if (!pattern.empty()) first_byte[static_cast<unsigned char>(pattern[0])] = true;
}

std::pair<int32_t, size_t> AddedTokens::Trie::longest_at(std::string_view text, size_t i) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t at = 0;
  for (size_t k = i; k < text.size(); ++k) {
    const auto& next = nodes[size_t(at)].next;
    const unsigned char b = static_cast<unsigned char>(text[k]);
    const auto it = std::lower_bound(next.begin(), next.end(), b, [](const auto& e, unsigned char v) { return e.first < v; });
    if (it == next.end() || it->first != b) break;
    at = it->second;
    if (nodes[size_t(at)].token >= 0) best = {nodes[size_t(at)].token, k + 1 - i};
  }
  return best;
}

AddedTokens::AddedTokens(const JsonNode& list, const BpeModel& model, const Normalizer* normalizer) {
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonNode t = list.at(i);
    AddedToken a;
    const int64_t id = t.at("id").integer();
    if (id < 0 || id >= (int64_t(1) << 31)) t.at("id").fail("expected an id in [0, 2^31)");
    a.id = int32_t(id);
    a.content = t.at("content").string();
    a.single_word = t.boolean_or("single_word", false);
    a.lstrip = t.boolean_or("lstrip", false);
    a.rstrip = t.boolean_or("rstrip", false);
    a.special = t.boolean_or("special", false);
    a.normalized = t.boolean_or("normalized", !a.special);
    if (a.content.empty()) continue;  // `tokenizers` ignores them
    if (const auto in_vocab = model.token_to_id(a.content); in_vocab && *in_vocab != a.id)
      t.at("id").fail("\"" + a.content + "\" has id " + std::to_string(*in_vocab) + " in model.vocab");
    bound_ = std::max<int64_t>(bound_, int64_t(a.id) + 1);
    tokens_.push_back(std::move(a));
  }
  for (size_t k = 0; k < tokens_.size(); ++k) {
    by_id_.emplace(tokens_[k].id, k);
    by_content_.emplace(tokens_[k].content, tokens_[k].id);
  }
  // Special tokens first, then the others, as `tokenizers` builds its matchers.
  std::vector<int32_t> order;
  for (int32_t k = 0; k < int32_t(tokens_.size()); ++k)
    if (tokens_[size_t(k)].special) order.push_back(k);
  for (int32_t k = 0; k < int32_t(tokens_.size()); ++k)
    if (!tokens_[size_t(k)].special) order.push_back(k);
  for (int32_t k : order) {
    const AddedToken& a = tokens_[size_t(k)];
    if (!a.normalized) {
      raw_.add(a.content, k);
    } else {
      std::string content = a.content;
      if (normalizer) normalizer->normalize(content);
      normalized_.add(content, k);
    }
  }
}

const AddedToken* AddedTokens::by_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedTokens::split(Piece&& piece, const Trie& trie, bool parse_special, Pieces& out) const {
  const std::string& s = piece.text;
  size_t start_offset = 0;
  auto emit_text = [&](size_t b, size_t e) {
    Piece p;
    p.text = s.substr(b, e - b);
    p.at_start = piece.at_start && b == 0;
    out.push_back(std::move(p));
  };
  for (size_t i = 0; i < s.size();) {
    if (!trie.first_byte[static_cast<unsigned char>(s[i])]) {
      ++i;
      continue;
    }
    const auto [k, len] = trie.longest_at(s, i);
    if (k < 0) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + len;
    i = stop;  // the search goes on after this match, whether it is kept or not
    const AddedToken& a = tokens_[size_t(k)];
    if (a.special && !parse_special) continue;
    if (a.single_word) {
      const bool start_space = start == 0 || !ends_with_word(s, start);
      const bool stop_space = stop == s.size() || !starts_with_word(s, stop);
      if (!start_space || !stop_space) continue;
    }
    if (a.lstrip) start = std::max(whitespace_run_start(s, start), start_offset);
    if (a.rstrip) stop = whitespace_run_end(s, stop);
    if (start_offset < start) emit_text(start_offset, start);
    Piece t;
    t.text = s.substr(start, stop - start);
    t.id = a.id;
    out.push_back(std::move(t));
    start_offset = stop;
  }
  if (start_offset < s.size()) emit_text(start_offset, s.size());
}

Pieces AddedTokens::extract_and_normalize(std::string_view text, const Normalizer* normalizer,
                                          bool parse_special) const {
  Pieces pieces;
  Piece whole;
  whole.text = std::string(text);
  whole.at_start = true;
  pieces.push_back(std::move(whole));
  split_text_pieces(pieces, [&](Piece&& p, Pieces& out) { split(std::move(p), raw_, parse_special, out); });
  split_text_pieces(pieces, [&](Piece&& p, Pieces& out) {
    if (normalizer) normalizer->normalize(p.text);
    split(std::move(p), normalized_, parse_special, out);
  });
  return pieces;
}

}  // namespace fsdp::data::hf
