// Splitting pieces; see pieces.h.
#include "pieces.h"

#include <algorithm>

namespace fsdp::data::hf {

void split_text_pieces(Pieces& pieces, const std::function<void(Piece&&, Pieces&)>& split) {
  Pieces out;
  out.reserve(pieces.size() * 2);
  for (Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    Pieces parts;
    split(std::move(p), parts);
    for (Piece& q : parts)
      if (!q.text.empty()) out.push_back(std::move(q));
  }
  pieces = std::move(out);
}

std::vector<Span> spans_of(const std::vector<std::pair<size_t, size_t>>& matches, size_t size) {
  std::vector<Span> spans;
  if (size == 0) return {{0, 0, false}};
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != size) spans.push_back({prev, size, false});
  return spans;
}

void apply_split(Piece&& piece, const std::vector<Span>& spans, SplitBehavior behavior, Pieces& out) {
  // (range, keep) after the behavior, as NormalizedString::split computes them.
  struct Range {
    size_t begin, end;
    bool keep;
  };
  std::vector<Range> ranges;
  ranges.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& s : spans) ranges.push_back({s.begin, s.end, true});
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans) ranges.push_back({s.begin, s.end, !s.match});
      break;
    case SplitBehavior::Contiguous: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.match == previous && !ranges.empty()) ranges.back().end = s.end;
        else ranges.push_back({s.begin, s.end, true});
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.match && !previous && !ranges.empty()) ranges.back().end = s.end;
        else ranges.push_back({s.begin, s.end, true});
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous && !ranges.empty()) ranges.back().begin = it->begin;
        else ranges.push_back({it->begin, it->end, true});
        previous = it->match;
      }
      std::reverse(ranges.begin(), ranges.end());
      break;
    }
  }
  for (const Range& r : ranges) {
    if (!r.keep) continue;
    Piece q;
    q.text = piece.text.substr(r.begin, r.end - r.begin);
    q.at_start = piece.at_start && r.begin == 0;
    out.push_back(std::move(q));
  }
}

}  // namespace fsdp::data::hf
