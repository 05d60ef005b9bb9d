#include "server/harmony.h"

#include <array>

#include <nlohmann/json.hpp>

#include "server/tool_call_scan.h"

namespace minfer::server {

namespace {

using detail::is_ws;
using detail::match;
using detail::npos;
using detail::skip_ws;

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kMessage = "<|message|>";

// What ends a body: the end markers (consumed), or the next message's header written without
// one (not consumed: the header is read from it).
struct Terminator {
  std::string_view text;
  bool consumed;
};
constexpr std::array<Terminator, 5> kTerminators = {{{"<|end|>", true},
                                                     {"<|call|>", true},
                                                     {"<|return|>", true},
                                                     {kStart, false},
                                                     {kChannel, false}}};

bool is_word(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == '-' || c == '.' || c == ':' || c == '/';
}

struct Header {
  std::string role, channel, recipient;
};

// A word at s[i] (moves i past it): More when the text ends in it (it may go on).
Scan scan_word(std::string_view s, size_t& i, std::string* out) {
  const size_t from = i;
  while (i < s.size() && is_word(s[i])) ++i;
  if (i >= s.size()) return Scan::More;
  if (i == from) return Scan::Bad;
  out->assign(s.substr(from, i - from));
  return Scan::Done;
}

// A header at s[i] (after whitespace): [<|start|>ROLE] then channels, recipients and content
// types in any order, up to <|message|>; *end is past it. Something must say what the message
// is (a role, a channel or a recipient) before a content type, so plain text is Bad at once.
Scan scan_header(std::string_view s, size_t i, size_t* end, Header* h) {
  i = skip_ws(s, i);
  bool seen = false;
  for (;;) {
    if (i >= s.size()) return Scan::More;
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    if (s[i] == '<') {
      bool more = false, matched = false;
      for (std::string_view tag : {kStart, kChannel, kConstrain, kMessage}) {
        const Scan m = match(s, i, tag);
        more |= m == Scan::More;
        if (m != Scan::Done) continue;
        i += tag.size();
        if (tag == kMessage) {
          if (!seen) return Scan::Bad;
          *end = i;
          return Scan::Done;
        }
        if (tag == kStart && seen) return Scan::Bad;  // a start in mid-header
        std::string word;
        // A content type may be left out after <|constrain|>; a role or channel may not.
        if (Scan w = scan_word(s, i, &word);
            w != Scan::Done && (w == Scan::More || tag != kConstrain))
          return w;
        if (tag == kStart) h->role = std::move(word);
        if (tag == kChannel) h->channel = std::move(word);
        seen |= tag != kConstrain;
        matched = true;
        break;
      }
      if (matched) continue;
      return more ? Scan::More : Scan::Bad;
    }
    const Scan to = match(s, i, "to=");
    if (to == Scan::More) return Scan::More;
    if (to == Scan::Done) {
      i += 3;
      if (Scan w = scan_word(s, i, &h->recipient); w != Scan::Done) return w;
      seen = true;
      continue;
    }
    if (!seen) return Scan::Bad;
    std::string type;  // the content type, " json" (its grammar is the JSON scan's)
    if (Scan w = scan_word(s, i, &type); w != Scan::Done) return w;
  }
}

// The first terminator at or after `from`: Done (at, its entry), More (a tail from `at` may
// become one) or Bad (none).
Scan find_terminator(std::string_view s, size_t from, size_t* at, const Terminator** t) {
  for (size_t i = s.find('<', from); i != npos; i = s.find('<', i + 1)) {
    bool more = false;
    for (const Terminator& term : kTerminators) {
      const Scan m = match(s, i, term.text);
      if (m == Scan::Done) {
        *at = i;
        *t = &term;
        return Scan::Done;
      }
      more |= m == Scan::More;
    }
    if (more) {
      *at = i;
      return Scan::More;
    }
  }
  return Scan::Bad;
}

}  // namespace

std::vector<std::string_view> harmony_markers() {
  return {kStart, kChannel, kConstrain, kMessage, "<|end|>", "<|call|>", "<|return|>"};
}

HarmonyParser::HarmonyParser(HarmonyReasoning mode, bool tools, bool parallel)
    : mode_(mode), tools_(tools), parallel_(parallel), rng_(std::random_device{}()) {}

std::vector<HarmonyDelta> HarmonyParser::push(std::string_view text) {
  std::vector<HarmonyDelta> out;
  if (finished_) return out;
  buf_.append(text);
  step(false, out);
  return out;
}

std::vector<HarmonyDelta> HarmonyParser::finish() {
  std::vector<HarmonyDelta> out;
  if (finished_) return out;
  step(true, out);
  pos_ = buf_.size();
  finished_ = true;
  return out;
}

void HarmonyParser::step(bool at_end, std::vector<HarmonyDelta>& out) {
  for (;;) {
    bool changed = false;
    switch (state_) {
      case State::Header:
        changed = step_header(at_end, out);
        break;
      case State::Body:
        changed = kind_ == Kind::Call ? step_call(at_end, out) : step_body(at_end, out);
        break;
      case State::Raw:
        emit(HarmonyDelta::Kind::Content, std::string_view(buf_).substr(pos_), out);
        pos_ = buf_.size();
        break;
    }
    if (!changed) return;
  }
}

std::string HarmonyParser::new_id() {
  static constexpr std::string_view kChars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uniform_int_distribution<size_t> pick(0, kChars.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[pick(rng_)];
  return id;
}

void HarmonyParser::emit(HarmonyDelta::Kind kind, std::string_view text,
                         std::vector<HarmonyDelta>& out) {
  if (text.empty()) return;
  (kind == HarmonyDelta::Kind::Reasoning ? reasoning_ : content_).append(text);
  if (!out.empty() && out.back().kind == kind)
    out.back().text.append(text);
  else
    out.push_back({kind, 0, std::string(text), {}});
}

void HarmonyParser::emit_body(std::string_view text, std::vector<HarmonyDelta>& out) {
  if (kind_ == Kind::Reasoning) emit(HarmonyDelta::Kind::Reasoning, text, out);
  if (kind_ == Kind::Content || raw_) emit(HarmonyDelta::Kind::Content, text, out);
}

// A header, complete or not; true when the state changed.
bool HarmonyParser::step_header(bool at_end, std::vector<HarmonyDelta>& out) {
  Header h;
  size_t end = 0;
  const Scan r = scan_header(buf_, pos_, &end, &h);
  if (r == Scan::More && !at_end) return false;
  if (r == Scan::More && any_message_) {  // markup cut at the end (or trailing whitespace)
    // Dropped, unless the text is kept as generated (reasoning_format none, deepseek-legacy).
    if (mode_ != HarmonyReasoning::Split)
      emit(HarmonyDelta::Kind::Content, std::string_view(buf_).substr(pos_), out);
    pos_ = buf_.size();
    return false;
  }
  if (r != Scan::Done) {  // not harmony: the text as generated from here on
    state_ = State::Raw;
    return true;
  }
  any_message_ = true;
  std::string name = h.recipient;
  if (name.rfind("functions.", 0) == 0) name.erase(0, 10);
  if (!h.recipient.empty() && tools_ && !name.empty()) {
    kind_ = Kind::Call;
    raw_ = false;
    call_name_ = std::move(name);
    args_.reset();
    call_index_ = npos;
    call_done_ = false;
  } else if (h.recipient.empty() && h.channel == "analysis") {
    kind_ = mode_ == HarmonyReasoning::Inline ? Kind::Content : Kind::Reasoning;
    raw_ = mode_ != HarmonyReasoning::Split;
  } else {  // final, a preamble in commentary, or a recipient without tools: content
    kind_ = Kind::Content;
    raw_ = mode_ != HarmonyReasoning::Split || !h.recipient.empty();
  }
  if (raw_) emit(HarmonyDelta::Kind::Content, std::string_view(buf_).substr(pos_, end - pos_), out);
  msg_at_ = pos_;
  pos_ = search_ = end;
  state_ = State::Body;
  return true;
}

void HarmonyParser::end_message(size_t body_end, size_t next, std::vector<HarmonyDelta>& out) {
  if (raw_)
    emit(HarmonyDelta::Kind::Content, std::string_view(buf_).substr(body_end, next - body_end),
         out);
  pos_ = search_ = next;
  state_ = State::Header;
}

// A reasoning or content body; true when it ended.
bool HarmonyParser::step_body(bool at_end, std::vector<HarmonyDelta>& out) {
  size_t at = 0;
  const Terminator* t = nullptr;
  const Scan r = find_terminator(buf_, search_, &at, &t);
  if (r == Scan::Done) {
    emit_body(std::string_view(buf_).substr(pos_, at - pos_), out);
    end_message(at, at + (t->consumed ? t->text.size() : 0), out);
    return true;
  }
  const size_t upto = r == Scan::More && !at_end ? at : buf_.size();
  emit_body(std::string_view(buf_).substr(pos_, upto - pos_), out);
  pos_ = search_ = upto;
  return false;
}

// A call that cannot be one: its message from the header on, and all after it, is content.
void HarmonyParser::break_call() {
  if (call_index_ != npos) broken_ = true;
  pos_ = msg_at_;
  state_ = State::Raw;
}

// A call's body: its arguments object streamed as it arrives; true when the state changed.
bool HarmonyParser::step_call(bool at_end, std::vector<HarmonyDelta>& out) {
  if (!args_) {
    const size_t i = skip_ws(buf_, pos_);
    if (i >= buf_.size()) {
      if (at_end) break_call();
      return at_end;
    }
    if (buf_[i] != '{') {  // no arguments object: the message is content, as generated
      kind_ = Kind::Content;
      raw_ = true;
      emit(HarmonyDelta::Kind::Content, std::string_view(buf_).substr(msg_at_, pos_ - msg_at_),
           out);
      return true;
    }
    args_.emplace(i);
    args_at_ = i;
    args_sent_ = 0;
    if (parallel_ || calls_.empty()) {
      call_index_ = calls_.size();
      calls_.push_back({new_id(), call_name_, {}});
      out.push_back({HarmonyDelta::Kind::Begin, call_index_, call_name_, calls_.back().id});
    }
  }
  if (!call_done_) {
    Scan r = args_->feed(buf_);
    const size_t upto = r == Scan::Done ? args_->end() : buf_.size();
    if (r == Scan::Done &&
        !nlohmann::json::accept(std::string_view(buf_).substr(args_at_, upto - args_at_)))
      r = Scan::Bad;
    if (r == Scan::Bad || (r == Scan::More && at_end)) {
      break_call();
      return true;
    }
    if (call_index_ != npos && upto > args_at_ + args_sent_) {
      const std::string frag = buf_.substr(args_at_ + args_sent_, upto - args_at_ - args_sent_);
      calls_[call_index_].arguments += frag;
      if (!out.empty() && out.back().kind == HarmonyDelta::Kind::Arguments &&
          out.back().index == call_index_)
        out.back().text += frag;
      else
        out.push_back({HarmonyDelta::Kind::Arguments, call_index_, frag, {}});
    }
    args_sent_ = upto - args_at_;
    if (r == Scan::More) return false;
    call_done_ = true;
    pos_ = search_ = upto;
  }
  // The call is complete: what follows up to its end marker is not part of it (dropped).
  size_t at = 0;
  const Terminator* t = nullptr;
  const Scan r = find_terminator(buf_, search_, &at, &t);
  if (r == Scan::Done) {
    pos_ = search_ = at + (t->consumed ? t->text.size() : 0);
    state_ = State::Header;
    return true;
  }
  pos_ = search_ = r == Scan::More && !at_end ? at : buf_.size();
  return false;
}

ParsedHarmony parse_harmony(HarmonyReasoning mode, bool tools, bool parallel,
                            std::string_view text) {
  HarmonyParser p(mode, tools, parallel);
  p.push(text);
  p.finish();
  ParsedHarmony out{p.reasoning(), p.content(), p.calls(), p.broken()};
  // A whole answer keeps the calls that completed; the broken one (always the last begun) is
  // in the content.
  if (out.broken) out.calls.pop_back();
  return out;
}

}  // namespace minfer::server
