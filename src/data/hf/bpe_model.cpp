// The BPE model; see bpe_model.h.
#include "bpe_model.h"

#include <algorithm>
#include <atomic>
#include <queue>

#include <fmt/format.h>

#include "utf8.h"

namespace fsdp::data::hf {

size_t StringHash::operator()(std::string_view s) const noexcept {
  // FNV-1a: short keys, no allocation, good enough spread for vocabularies.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return size_t(h ^ (h >> 32));
}

namespace {

std::atomic<uint64_t> g_next_cache_key{1};

// The merges as pairs of tokens: "left right" (files before tokenizers 0.20) or
// ["left", "right"].
std::pair<std::string, std::string> merge_pair(const JsonNode& m) {
  if (m.json().is_string()) {
    const std::string s = m.string();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
      m.fail("expected \"left right\" or [\"left\", \"right\"]");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.json().is_array() && m.size() == 2) return {m.at(0).string(), m.at(1).string()};
  m.fail("expected \"left right\" or [\"left\", \"right\"]");
}

// The per-thread cache of words already tokenized, for one model at a time.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
};
constexpr size_t kCacheWords = 1 << 16;   // cleared when full: bounded memory per thread
constexpr size_t kCacheMaxBytes = 256;     // longer words are not cached, as in `tokenizers`

}  // namespace

BpeModel::BpeModel(const JsonNode& model) : cache_key_(g_next_cache_key.fetch_add(1)) {
  if (const auto d = model.get("dropout"); d && d->number() != 0.0)
    d->fail("BPE dropout is for training only; set it to null to tokenize with this file");
  const JsonNode vocab = model.at("vocab");
  if (!vocab.json().is_object()) vocab.fail("expected an object of token: id");
  vocab_.reserve(vocab.json().size());
  int64_t bound = 0;
  for (const auto& [token, id_json] : vocab.json().items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= (int64_t(1) << 31))
      vocab.fail("\"" + token + "\": expected an id in [0, 2^31)");
    const int32_t id = int32_t(id_json.get<int64_t>());
    vocab_.emplace(token, id);
    bound = std::max<int64_t>(bound, int64_t(id) + 1);
  }
  id_bound_ = bound;
  tokens_.reserve(vocab_.size());
  for (const auto& [token, id] : vocab_) tokens_.emplace(id, token);

  if (const auto u = model.get("unk_token")) {
    const std::string unk = u->string();
    const auto it = vocab_.find(unk);
    if (it == vocab_.end()) u->fail("the unk token \"" + unk + "\" is not in model.vocab");
    unk_ = it->second;
  }
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  byte_fallback_ = model.boolean_or("byte_fallback", false);
  ignore_merges_ = model.boolean_or("ignore_merges", false);
  prefix_ = model.string_or("continuing_subword_prefix", "");
  suffix_ = model.string_or("end_of_word_suffix", "");
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[size_t(b)] = it == vocab_.end() ? -1 : it->second;
  }

  const JsonNode merges = model.at("merges");
  const size_t n = merges.size();
  merges_.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    const JsonNode m = merges.at(r);
    const auto [left, right] = merge_pair(m);
    const auto a = vocab_.find(left), b = vocab_.find(right);
    if (a == vocab_.end()) m.fail("\"" + left + "\" is not in model.vocab");
    if (b == vocab_.end()) m.fail("\"" + right + "\" is not in model.vocab");
    // The merged token drops the right part's continuing_subword_prefix (its length in bytes,
    // as `tokenizers` cuts it).
    const std::string_view rest = std::string_view(right).substr(std::min(prefix_.size(), right.size()));
    const std::string merged = left + std::string(rest);
    const auto c = vocab_.find(merged);
    if (c == vocab_.end()) m.fail("the merged token \"" + merged + "\" is not in model.vocab");
    const uint64_t key = (uint64_t(uint32_t(a->second)) << 32) | uint32_t(b->second);
    merges_.insert_or_assign(key, Merge{int32_t(r), c->second});  // a repeated pair: the last rank, as in `tokenizers`
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local WordCache cache;
  if (cache.owner != cache_key_) {
    cache.words.clear();
    cache.owner = cache_key_;
  }
  if (const auto it = cache.words.find(word); it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (word.size() < kCacheMaxBytes) {
    if (cache.words.size() >= kCacheWords) cache.words.clear();
    cache.words.emplace(std::string(word), std::vector<int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
  }
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](int32_t id) {
    const int32_t pos = int32_t(symbols.size());
    symbols.push_back({id, pos - 1, -1, false});
    if (pos > 0) symbols[size_t(pos - 1)].next = pos;
  };
  int32_t pending_unk = -1;  // an unk waiting to see whether the next one fuses
  std::string piece;
  for (size_t i = 0; i < w.size();) {
    const int n = utf8_sequence_length(w, i);
    const size_t len = size_t(n > 0 ? n : 1);
    const bool is_first = i == 0, is_last = i + len >= w.size();
    piece.assign(w.substr(i, len));
    if (!is_first && !prefix_.empty()) piece.insert(0, prefix_);
    if (is_last && !suffix_.empty()) piece += suffix_;
    i += len;
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : piece) all = all && byte_ids_[b] >= 0;
      if (all) {
        // `tokenizers` leaves a pending unk where it is (it is added before the next
        // character found in the vocabulary, or at the end).
        for (unsigned char b : piece) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  // Lowest rank first; among equal ranks the leftmost position (tokenizers' Merge ordering).
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto find_merge = [&](int32_t a, int32_t b) -> const Merge* {
    const auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t p = 0; p + 1 < symbols.size(); ++p)
    if (const Merge* m = find_merge(symbols[p].id, symbols[p + 1].id)) queue.push({m->rank, int32_t(p), m->id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // an entry that no longer applies
    left.id = top.id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = top.pos;
    if (left.prev >= 0)
      if (const Merge* pm = find_merge(symbols[size_t(left.prev)].id, left.id))
        queue.push({pm->rank, left.prev, pm->id});
    if (left.next >= 0)
      if (const Merge* nm = find_merge(left.id, symbols[size_t(left.next)].id)) queue.push({nm->rank, top.pos, nm->id});
  }
  for (const Symbol& s : symbols)
    if (!s.removed) out.push_back(s.id);
}

}  // namespace fsdp::data::hf
