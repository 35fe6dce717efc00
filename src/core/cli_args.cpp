#include "fsdp/core/cli_args.h"

#include <algorithm>

namespace fsdp {

namespace {

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("trian" is
// one edit from "train"); '_' and '-' are the same letter.
size_t edit_distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) { return x == y || ((x == '_' || x == '-') && (y == '_' || y == '-')); };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_match(std::string_view typo, const std::vector<std::string>& candidates) {
  const size_t limit = std::clamp<size_t>(typo.size() / 3, 1, 2);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t dist = edit_distance(typo, c);
    if (dist < best_distance) best = c, best_distance = dist;
  }
  return best;
}

std::string closest_value(std::string_view typo, const std::vector<std::string>& candidates) {
  std::string guess = closest_match(typo, candidates);
  return !guess.empty() && !typo.empty() && guess[0] == typo[0] ? guess : std::string();
}

UsageError unknown_argument(const std::string& raw, const std::vector<std::string>& flags) {
  const std::string flag = raw.substr(0, raw.find('='));
  const std::string guess = flag.starts_with("-") ? closest_match(flag, flags) : std::string();
  return UsageError{"unknown argument '" + raw + "'" + (guess.empty() ? "" : " (did you mean " + guess + "?)")};
}

bool ArgCursor::next() {
  if (i_ + 1 >= argc_) return false;
  raw_ = arg_ = argv_[++i_];
  has_inline_ = false;
  inline_.clear();
  if (arg_.starts_with("--")) {
    if (const auto eq = arg_.find('='); eq != std::string::npos) {
      inline_ = arg_.substr(eq + 1);
      arg_.resize(eq);
      has_inline_ = true;
    }
  }
  return true;
}

std::string ArgCursor::value() {
  if (has_inline_) return inline_;
  if (i_ + 1 >= argc_) throw UsageError{arg_ + " needs a value"};
  return argv_[++i_];
}

}  // namespace fsdp
