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
    ReasoningSyntax{"harmony",
                    "<|channel|>analysis<|message|>",
                    "<|end|>",
                    "<|start|>assistant",
                    "<|channel|>final<|message|>",
                    {},
                    "<|channel|>analysis<|message|>"},
    // Solar's <|end|> closes every message (and is text in other templates), Gemma 4 writes
    // <|think|> too: told by its thinking message's header.
    ReasoningSyntax{"solar",
                    "<|think|>",
                    "<|end|>",
                    "<|begin|>assistant",
                    "<|content|>",
                    {"<|end|>"},
                    "<|begin|>assistant<|think|>"},
    // Kimi K3's template builds its tags with a macro: open_tag('think') is what it writes.
    ReasoningSyntax{"kimi_k3",
                    "<|open|>think<|sep|>",
                    "<|close|>think<|sep|>",
                    {},
                    "<|open|>response<|sep|>",
                    {"<|close|>response<|sep|>", "<|close|>message<|sep|>", "<|end_of_msg|>"},
                    "open_tag('think'"},
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
  if (name == "deepseek-legacy") return ReasoningFormat::DeepSeekLegacy;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::None:
      return "none";
    case ReasoningFormat::DeepSeek:
      return "deepseek";
    case ReasoningFormat::DeepSeekLegacy:
      return "deepseek-legacy";
    case ReasoningFormat::Auto:
      break;
  }
  return "auto";
}

ReasoningSyntax detect_reasoning_syntax(std::string_view t) {
  auto has = [&](std::string_view w) { return t.find(w) != std::string_view::npos; };
  for (const ReasoningSyntax& s : kSyntaxes)
    if (s.detect.empty() ? has(s.open) || has(s.close) : has(s.detect)) return s;
  return kNone;
}

std::vector<std::string_view> reasoning_markers(const ReasoningSyntax& s) {
  std::vector<std::string_view> out;
  for (std::string_view m : {s.open, s.close, s.after_close, s.content_open})
    if (!m.empty()) out.push_back(m);
  for (std::string_view m : s.trailers)
    if (!m.empty()) out.push_back(m);
  return out;
}

ReasoningSyntax choose_reasoning_syntax(ReasoningFormat f, ReasoningSyntax detected) {
  if (f == ReasoningFormat::None) return kNone;
  const bool deepseek = f == ReasoningFormat::DeepSeek || f == ReasoningFormat::DeepSeekLegacy;
  if (deepseek && detected.empty()) return kThink;
  return detected;
}

bool prompt_opens_reasoning(const ReasoningSyntax& s, std::string_view prompt) {
  return !s.empty() && rtrim(prompt).ends_with(s.open);
}

bool prompt_closes_reasoning(const ReasoningSyntax& s, std::string_view prompt) {
  return !s.empty() && rtrim(prompt).ends_with(s.close);
}

ReasoningSplitter::ReasoningSplitter(ReasoningSyntax syntax, bool inside, bool keep_text)
    : syntax_(syntax),
      state_(syntax.empty() ? State::Content
             : inside       ? State::StartInside
                            : State::Start),
      keep_text_(keep_text) {}

ReasoningPiece ReasoningSplitter::push(std::string_view text) {
  ReasoningPiece out;
  if (finished_) return out;
  if (keep_text_) {  // deepseek-legacy: the content is the text as generated
    out.content.append(text);
    content_.append(text);
  }
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

void ReasoningSplitter::emit_content(std::string_view text, ReasoningPiece& out) {
  if (keep_text_) return;  // sent as pushed
  out.content.append(text);
  content_.append(text);
}

// The content: as it comes, but for the syntax's trailers (dropped; a tail that may start one
// waits).
void ReasoningSplitter::step_content(bool at_end, ReasoningPiece& out) {
  for (;;) {
    size_t at = std::string::npos, len = 0;
    for (std::string_view t : syntax_.trailers)
      if (const size_t i = t.empty() ? std::string::npos : held_.find(t); i < at) {
        at = i;
        len = t.size();
      }
    if (at == std::string::npos) break;
    emit_content(std::string_view(held_).substr(0, at), out);
    held_.erase(0, at + len);
  }
  size_t keep = 0;
  if (!at_end)
    for (std::string_view t : syntax_.trailers)
      if (!t.empty()) keep = std::max(keep, partial_tail(held_, t));
  emit_content(std::string_view(held_).substr(0, held_.size() - keep), out);
  held_.erase(0, held_.size() - keep);
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
        const std::string_view rest = std::string_view(held_).substr(i);
        const Match m = match(rest, syntax_.open);
        // An answer without thinking may open with the content's own marker (Solar Open).
        const Match mc = state_ == State::Start && !syntax_.content_open.empty()
                             ? match(rest, syntax_.content_open)
                             : Match::Bad;
        if (m == Match::Done) {  // the thinking opens here (or, already open, is opened again)
          held_.erase(0, i + syntax_.open.size());
          state_ = State::Inside;
        } else if (mc == Match::Done) {
          held_.erase(0, i + syntax_.content_open.size());
          state_ = State::Content;
        } else if ((m == Match::More || mc == Match::More) && !at_end) {
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
      case State::ContentOpen: {
        // After the close: whitespace, then the next message's header and the content's
        // opening marker where the syntax has them (each dropped when the text has it).
        held_.erase(0, skip_ws(held_));
        if (held_.empty()) break;
        const std::string_view word =
            state_ == State::AfterClose ? syntax_.after_close : syntax_.content_open;
        const Match m = word.empty() ? Match::Bad : match(held_, word);
        if (m == Match::More && !at_end) return;
        if (m == Match::Done) held_.erase(0, word.size());
        state_ = state_ == State::AfterClose ? State::ContentOpen : State::Content;
        break;
      }
      case State::Content:
        step_content(at_end, out);
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
    case State::ContentOpen:
    case State::Content:
      break;
  }
  return Phase::Answer;
}

ReasoningPiece split_reasoning(ReasoningSyntax syntax, bool inside, std::string_view text,
                               bool keep_text) {
  ReasoningSplitter s(syntax, inside, keep_text);
  s.push(text);
  s.finish();
  return {s.reasoning(), s.content()};
}

}  // namespace minfer::server
