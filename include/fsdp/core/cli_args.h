// Command-line flags of the subcommands that parse their own (prepare, generate, export):
// "--flag value", "--flag=value" and positional arguments, walked one at a time.
//
//   ArgCursor args(argc, argv);          // argv[0] is the subcommand's name
//   while (args.next()) {
//     if (args.arg() == "--output") out = args.value();
//     else if (!args.arg().starts_with("-")) inputs.push_back(args.arg());
//     else throw UsageError{"unknown argument '" + args.raw() + "'"};
//   }
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fsdp {

// A bad command line: the subcommand prints the message with a pointer to its --help and
// exits 2 without doing anything.
struct UsageError {
  std::string message;
};

class ArgCursor {
 public:
  ArgCursor(int argc, char** argv) : argc_(argc), argv_(argv) {}

  // Moves to the next argument; false when there is none.
  bool next();
  // The argument: a flag without its "=value" ("--output"), or a positional argument.
  const std::string& arg() const { return arg_; }
  // The argument as given ("--output=dir"), for messages.
  const std::string& raw() const { return raw_; }
  // Whether a value came with the flag ("--flag=value").
  bool has_inline_value() const { return has_inline_; }
  // The flag's value: the part after '=', else the next argument (consumed). A flag at the
  // end of the line throws UsageError "<flag> needs a value".
  std::string value();

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string raw_, arg_, inline_;
  bool has_inline_ = false;
};

// The candidate closest to `typo` when it is close enough to be one (at most 2 edits and a
// third of the word; '_' and '-' count as the same, so --max_new_tokens finds
// --max-new-tokens), else "". Config keys, their values and command-line flags share it.
std::string closest_match(std::string_view typo, const std::vector<std::string>& candidates);
// The same for a value of a closed list, which must also start with the typo's letter: "gpu"
// is one edit from "cpu", and the user who wrote it wants the GPU.
std::string closest_value(std::string_view typo, const std::vector<std::string>& candidates);

// "unknown argument '--max_new_tokens' (did you mean --max-new-tokens?)", with `flags`
// the command's flags.
UsageError unknown_argument(const std::string& raw, const std::vector<std::string>& flags);

}  // namespace fsdp
