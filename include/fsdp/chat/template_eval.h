// Renders a parsed template with Jinja's semantics in transformers' environment: the globals
// raise_exception, strftime_now, namespace, range and dict; a for loop's body is a new scope
// each iteration (a `set` inside it is gone after the iteration: templates carry state out of
// loops through namespace()); `if` opens no scope; `loop.index0` and friends; break and
// continue (transformers enables the loopcontrols extension); `{% generation %}` blocks are
// rendered and their byte ranges recorded (transformers' assistant-token mask).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/chat/template_parser.h"

namespace fsdp::chat {

struct RenderOptions {
  // strftime_now's clock (local time, as Python's datetime.now()); the system clock when empty.
  std::function<std::chrono::system_clock::time_point()> now;
  // Loop iterations and macro calls a render may make before it is stopped (a template from
  // an untrusted model folder must not hang a job); 0 for no limit.
  int64_t max_steps = 100'000'000;
  // The longest output, and the longest string or list a template may build, in bytes or items.
  size_t max_output = size_t(1) << 30;
};

struct RenderResult {
  std::string text;
  // [begin, end) byte offsets in text of each {% generation %} block, in order.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

// `variables` are the template's context (messages, add_generation_prompt, bos_token, ...).
// Throws TemplateError naming the line and column where rendering failed.
RenderResult render_template(const ParsedTemplate& t, const std::vector<std::pair<std::string, Value>>& variables,
                             const RenderOptions& options = {});

}  // namespace fsdp::chat
