// The unit the tokenizer.json pipeline passes along: the input split into pieces, each either
// text still to be normalized, pre-tokenized and run through the model, or an added token
// already found (its id fixed). As in `tokenizers`' PreTokenizedString, every stage after
// the added-token extraction works on the text pieces alone and drops pieces that become
// empty.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fsdp::data::hf {

struct Piece {
  std::string text;
  int32_t id = -1;        // >= 0: an added token
  bool at_start = false;  // begins at offset 0 of the input (Metaspace's prepend_scheme "first")
};
using Pieces = std::vector<Piece>;

// Replaces every text piece by what `split` makes of it (sub-pieces in order; the first of
// them keeps at_start when it begins where its piece began); empty results are dropped.
void split_text_pieces(Pieces& pieces, const std::function<void(Piece&&, Pieces&)>& split);

// How a split keeps the delimiters it found ("behavior" in tokenizer.json), as
// SplitDelimiterBehavior of `tokenizers`.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// A text divided into ranges, each a match of some pattern or not, covering all of it.
struct Span {
  size_t begin, end;
  bool match;
};
// The sub-pieces of `piece` that `behavior` keeps from `spans`, appended to `out`.
void apply_split(Piece&& piece, const std::vector<Span>& spans, SplitBehavior behavior, Pieces& out);
// Spans from a list of match ranges (non-overlapping, in order) over a text of `size` bytes.
std::vector<Span> spans_of(const std::vector<std::pair<size_t, size_t>>& matches, size_t size);

}  // namespace fsdp::data::hf
