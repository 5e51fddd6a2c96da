// SPDX-License-Identifier: Apache-2.0
#include "yaml/input_guard.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "util/text.h"
#include "yaml/document.h"

namespace agentcage::yaml {
namespace {

// Line and column (1-based, columns in bytes like yaml-cpp's marks) while
// walking the text byte by byte.
struct Cursor {
  int line = 1;
  int column = 1;
  void advance(char c) {
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  Position pos() const { return {line, column}; }
};

std::string hex_byte(char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
  return buf;
}

// NUL, other control characters and malformed UTF-8 all mean "not a text
// file"; yaml-cpp would otherwise guess an encoding or stop at the NUL.
bool check_encoding(std::string_view text, const InputKind& kind, Reporter& reporter) {
  const std::string text_files = std::string(kind.noun) + " files";
  Cursor at;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const auto byte = static_cast<unsigned char>(c);
    if (byte == 0) {
      reporter.error(at.pos(), "NUL byte: " + text_files + " are UTF-8 text (is this a binary file?)");
      return false;
    }
    if ((byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7f) {
      reporter.error(at.pos(), "control character " + hex_byte(c) + ": " + text_files +
                                   " are UTF-8 text (is this a binary file?)");
      return false;
    }
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      reporter.error(at.pos(),
                     "invalid UTF-8 (byte " + hex_byte(c) + "): " + text_files + " must be UTF-8 text");
      return false;
    }
    at.advance(c);
    at.column += static_cast<int>(n) - 1;
    i += n;
  }
  return true;
}

// yaml-cpp parses flow collections recursively; reject deep [ / { nesting
// before it sees the text. This is a scan, not a parser: it skips comments
// and quoted scalars and counts a bracket only where a flow collection can
// start (start of a token). Where it cannot tell it over-counts, which only
// matters for absurd files. The event pass below bounds all nesting again.
bool check_flow_nesting(std::string_view text, Reporter& reporter) {
  enum class State { normal, comment, double_quoted, single_quoted };
  State state = State::normal;
  Cursor at;
  int depth = 0;
  char previous = '\n';
  bool escaped = false;  // previous character was a backslash in "..."
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool token_start = previous == '\n' || previous == '\r' || previous == ' ' || previous == '\t' ||
                             previous == '[' || previous == '{' || previous == ',' || previous == ':' ||
                             previous == '-' || previous == '?';
    switch (state) {
      case State::comment:
        if (c == '\n') state = State::normal;
        break;
      case State::double_quoted:
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          state = State::normal;
        }
        break;
      case State::single_quoted:
        if (c == '\'') {
          if (i + 1 < text.size() && text[i + 1] == '\'') {
            at.advance(c);  // '' is an escaped quote: step over both
            ++i;
          } else {
            state = State::normal;
          }
        }
        break;
      case State::normal:
        if (c == '#' && (previous == '\n' || previous == ' ' || previous == '\t' || previous == '\r')) {
          state = State::comment;
        } else if (c == '"' && token_start) {
          state = State::double_quoted;
        } else if (c == '\'' && token_start) {
          state = State::single_quoted;
        } else if ((c == '[' || c == '{') && token_start) {
          if (++depth > kMaxNesting) {
            reporter.error(at.pos(), "flow collections ([...] / {...}) nested deeper than " +
                                         std::to_string(kMaxNesting) + " levels");
            return false;
          }
        } else if ((c == ']' || c == '}') && depth > 0) {
          --depth;
        }
        break;
    }
    previous = c;
    at.advance(c);
  }
  return true;
}

// A plain value that starts with '*' is an alias in YAML.
constexpr const char* kQuoteStarHint = " (a value that starts with '*' must be quoted: \"**/.env\")";

// `{` and `}` are flow indicators in YAML, so an unquoted ${workspace}
// inside [ ] or { } is a syntax error in every conforming parser, and the
// one users are most likely to make. Say how to write it when the line the
// parser stopped on has one.
std::string flow_variable_hint(std::string_view text, const YAML::Mark& mark) {
  if (mark.is_null() || mark.pos < 0) return {};
  const size_t at = std::min(static_cast<size_t>(mark.pos), text.size());
  const size_t begin = text.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t start = begin == std::string_view::npos ? 0 : begin + 1;
  const size_t end = text.find('\n', start);
  const std::string_view line = text.substr(start, end == std::string_view::npos ? end : end - start);
  if (line.find("${") == std::string_view::npos) return {};
  return " (inside [ ] or { }, quote values that contain ${...}, e.g. [\"${workspace}\"], or use a "
         "block list: \"- ${workspace}\")";
}

// Thrown from the handler to stop the event parser early.
struct Stop {};

class Guard : public YAML::EventHandler {
 public:
  Guard(const InputKind& kind, Reporter& reporter) : kind_(kind), reporter_(reporter) {}
  int documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      reporter_.error(pos_of(mark), "a second YAML document: a " + std::string(kind_.noun) +
                                        " file holds exactly one document");
      throw Stop{};
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    reporter_.error(pos_of(mark),
                    "aliases (*name) are not allowed in " + std::string(kind_.place) + kQuoteStarHint);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t, const std::string&) override {
    check_tag(mark, tag);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    check_tag(mark, tag);
    enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    check_tag(mark, tag);
    enter(mark);
  }
  void OnMapEnd() override { --depth_; }
  // Anchors are harmless alone, but they only exist to be aliased, and a
  // policy or a configuration is short enough to spell out.
  void OnAnchor(const YAML::Mark& mark, const std::string& name) override {
    reporter_.error(pos_of(mark), "anchor " + quote("&" + name, 32) +
                                      ": anchors and aliases are not allowed in " + std::string(kind_.place));
  }

 private:
  // "?" is an untagged plain node, "!" an untagged quoted one (or the
  // explicit non-specific tag, which means the same). Anything else is an
  // explicit tag like !!binary or !custom, which none of our files has a use for.
  void check_tag(const YAML::Mark& mark, const std::string& tag) {
    if (tag.empty() || tag == "?" || tag == "!") return;
    // yaml-cpp hands out "!!str" resolved; show it the way it was written.
    constexpr std::string_view kCore = "tag:yaml.org,2002:";
    const std::string shown = tag.starts_with(kCore) ? "!!" + tag.substr(kCore.size()) : tag;
    reporter_.error(pos_of(mark),
                    "YAML tag " + quote(shown, 48) + " is not allowed in " + std::string(kind_.place));
  }
  void enter(const YAML::Mark& mark) {
    if (++depth_ > kMaxNesting) {
      reporter_.error(pos_of(mark),
                      "collections nested deeper than " + std::to_string(kMaxNesting) + " levels");
      throw Stop{};
    }
  }

  const InputKind& kind_;
  Reporter& reporter_;
  int documents_ = 0;
  int depth_ = 0;
};

}  // namespace

bool check_text(std::string_view text, const InputKind& kind, Reporter& reporter) {
  if (text.size() > kind.max_bytes) {
    reporter.error({}, std::string(kind.noun) + " is " + std::to_string(text.size()) +
                           " bytes; the limit is " + std::to_string(kind.max_bytes) + " bytes");
    return false;
  }
  return check_encoding(text, kind, reporter) && check_flow_nesting(text, reporter);
}

bool check_events(std::string_view text, const InputKind& kind, Reporter& reporter) {
  const size_t before = reporter.count();
  std::istringstream in{std::string(text)};
  YAML::Parser parser(in);
  Guard guard(kind, reporter);
  try {
    while (parser.HandleNextDocument(guard)) {
    }
  } catch (const Stop&) {
  } catch (const YAML::Exception& e) {
    // yaml-cpp quotes input bytes in some messages ("unknown escape
    // character: <byte>"), possibly half a UTF-8 sequence. An unquoted
    // "**/.env" is an alias of an anchor that does not exist.
    const bool alias = e.msg.find("anchor") != std::string::npos;
    reporter.error(pos_of(e.mark),
                   "YAML syntax error: " + escape(e.msg, 200) +
                       (alias ? std::string(kQuoteStarHint) : flow_variable_hint(text, e.mark)));
  }
  if (guard.documents() == 0 && !kind.empty_is_valid && reporter.count() == before) {
    reporter.error({1, 1}, "empty " + std::string(kind.noun) +
                               ": the file has no YAML content (only whitespace or comments)");
  }
  return reporter.count() == before;
}

}  // namespace agentcage::yaml
