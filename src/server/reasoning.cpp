#include "server/reasoning.h"

#include <algorithm>
#include <array>

namespace minfer::server {

namespace {

constexpr ReasoningSyntax kNone{"none", "", ""};
constexpr ReasoningSyntax kThink{"think", "<think>", "</think>"};

// Most specific first: MiniMax's and Gemma's markers would otherwise not be told from others,
// and a template may mention <think> in prose while teaching another syntax.
constexpr std::array kSyntaxes = {
    ReasoningSyntax{"mistral", "[THINK]", "[/THINK]"},
    ReasoningSyntax{"minimax", "<mm:think>", "</mm:think>"},
    ReasoningSyntax{"command", "<|START_THINKING|>", "<|END_THINKING|>"},
    ReasoningSyntax{"gemma4", "<|channel>thought", "<channel|>"},
    ReasoningSyntax{"apriel", "Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"},
    kThink,
};

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t skip_ws(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// Done: `s` starts with `word`; More: `s` is a proper prefix of it; Bad: neither.
enum class Match { Done, More, Bad };
Match match(std::string_view s, std::string_view word) {
  if (s.size() >= word.size()) return s.substr(0, word.size()) == word ? Match::Done : Match::Bad;
  return word.substr(0, s.size()) == s ? Match::More : Match::Bad;
}

// The longest tail of `s` that is a proper prefix of `word`.
size_t partial_tail(std::string_view s, std::string_view word) {
  for (size_t len = std::min(word.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == word.substr(0, len)) return len;
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> parse_reasoning_format(std::string_view name) {
  if (name == "auto") return ReasoningFormat::Auto;
  if (name == "none") return ReasoningFormat::None;
  if (name == "deepseek") return ReasoningFormat::DeepSeek;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::None:
      return "none";
    case ReasoningFormat::DeepSeek:
      return "deepseek";
    case ReasoningFormat::Auto:
      break;
  }
  return "auto";
}

ReasoningSyntax detect_reasoning_syntax(std::string_view t) {
  for (const ReasoningSyntax& s : kSyntaxes)
    if (t.find(s.open) != std::string_view::npos || t.find(s.close) != std::string_view::npos)
      return s;
  return kNone;
}

ReasoningSyntax choose_reasoning_syntax(ReasoningFormat f, ReasoningSyntax detected) {
  if (f == ReasoningFormat::None) return kNone;
  if (f == ReasoningFormat::DeepSeek && detected.empty()) return kThink;
  return detected;
}

bool prompt_opens_reasoning(const ReasoningSyntax& s, std::string_view prompt) {
  return !s.empty() && rtrim(prompt).ends_with(s.open);
}

bool prompt_closes_reasoning(const ReasoningSyntax& s, std::string_view prompt) {
  return !s.empty() && rtrim(prompt).ends_with(s.close);
}

ReasoningSplitter::ReasoningSplitter(ReasoningSyntax syntax, bool inside)
    : syntax_(syntax),
      state_(syntax.empty() ? State::Content
             : inside       ? State::StartInside
                            : State::Start) {}

ReasoningPiece ReasoningSplitter::push(std::string_view text) {
  ReasoningPiece out;
  if (finished_) return out;
  held_.append(text);
  step(false, out);
  return out;
}

ReasoningPiece ReasoningSplitter::finish() {
  ReasoningPiece out;
  if (finished_) return out;
  step(true, out);
  finished_ = true;
  return out;
}

void ReasoningSplitter::emit_reasoning(std::string_view text, ReasoningPiece& out) {
  if (!reasoning_started_) {
    text.remove_prefix(skip_ws(text));
    if (text.empty()) return;
    reasoning_started_ = true;
  }
  out.reasoning.append(text);
  reasoning_.append(text);
}

// Inside the thinking: up to the close marker is reasoning; a tail that may start the marker,
// and whitespace before it (dropped if the marker follows), wait for more text.
void ReasoningSplitter::step_inside(bool at_end, ReasoningPiece& out) {
  const std::string_view h = held_;
  if (const size_t at = h.find(syntax_.close); at != std::string_view::npos) {
    emit_reasoning(rtrim(h.substr(0, at)), out);
    held_.erase(0, at + syntax_.close.size());
    state_ = State::AfterClose;
    return;
  }
  if (at_end) {
    emit_reasoning(rtrim(h), out);
    held_.clear();
    return;
  }
  size_t send = h.size() - partial_tail(h, syntax_.close);
  while (send > 0 && is_ws(h[send - 1])) --send;
  emit_reasoning(h.substr(0, send), out);
  held_.erase(0, send);
}

void ReasoningSplitter::step(bool at_end, ReasoningPiece& out) {
  for (;;) {
    const State before = state_;
    switch (state_) {
      case State::Start:
      case State::StartInside: {
        const size_t i = skip_ws(held_);
        const Match m = match(std::string_view(held_).substr(i), syntax_.open);
        if (m == Match::Done) {  // the thinking opens here (or, already open, is opened again)
          held_.erase(0, i + syntax_.open.size());
          state_ = State::Inside;
        } else if (m == Match::More && !at_end) {
          return;  // whitespace or a part of the marker: wait
        } else {
          state_ = state_ == State::Start ? State::Content : State::Inside;
        }
        break;
      }
      case State::Inside:
        thought_ = true;
        step_inside(at_end, out);
        break;
      case State::AfterClose:
        held_.erase(0, skip_ws(held_));
        if (!held_.empty()) state_ = State::Content;
        break;
      case State::Content:
        out.content.append(held_);
        content_.append(held_);
        held_.clear();
        break;
    }
    if (state_ == before) return;
  }
}

ReasoningSplitter::Phase ReasoningSplitter::phase() const {
  switch (state_) {
    case State::Start:
    case State::StartInside:
      return Phase::Start;
    case State::Inside:
      return Phase::Thinking;
    case State::AfterClose:
    case State::Content:
      break;
  }
  return Phase::Answer;
}

ReasoningPiece split_reasoning(ReasoningSyntax syntax, bool inside, std::string_view text) {
  ReasoningSplitter s(syntax, inside);
  s.push(text);
  s.finish();
  return {s.reasoning(), s.content()};
}

}  // namespace minfer::server
