#include "server/json_scan.h"

namespace minfer::server {

namespace {

// A number's states: what was read last.
enum Num : uint8_t { kSign, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

// A scalar or container ended at `end`; true when it was the whole value.
bool JsonScanner::value_done(size_t end) {
  want_ = Want::CommaOrClose;
  if (!open_.empty()) return false;
  end_ = end;
  status_ = Scan::Done;
  return true;
}

// One byte outside a string, literal or number; false when the scan is over (Done or Bad).
bool JsonScanner::step_none(char c, size_t i) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  switch (want_) {
    case Want::KeyOrClose:
    case Want::ValueOrClose:
      if (c == (want_ == Want::KeyOrClose ? '}' : ']')) {
        open_.pop_back();
        return !value_done(i + 1);
      }
      if (want_ == Want::KeyOrClose) {
        want_ = Want::Key;
        return step_none(c, i);  // the same byte, as a key
      }
      [[fallthrough]];
    case Want::Value:
      if (c == '{' || c == '[') {
        open_.push_back(c);
        want_ = c == '{' ? Want::KeyOrClose : Want::ValueOrClose;
      } else if (c == '"') {
        lex_ = Lex::Str;
        key_ = false;
      } else if (c == 't' || c == 'f' || c == 'n') {
        lex_ = Lex::Lit;
        lit_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
        sub_ = 1;
      } else if (c == '-' || is_digit(c)) {
        lex_ = Lex::Num;
        sub_ = c == '-' ? kSign : c == '0' ? kZero : kInt;
      } else {
        status_ = Scan::Bad;
        return false;
      }
      return true;
    case Want::Key:
      if (c != '"') break;
      lex_ = Lex::Str;
      key_ = true;
      return true;
    case Want::Colon:
      if (c != ':') break;
      want_ = Want::Value;
      return true;
    case Want::CommaOrClose:
      if (c == ',') {
        want_ = open_.back() == '{' ? Want::Key : Want::Value;
        return true;
      }
      if (c != (open_.back() == '{' ? '}' : ']')) break;
      open_.pop_back();
      return !value_done(i + 1);
  }
  status_ = Scan::Bad;
  return false;
}

// One byte of a number: true when it belongs to it (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?);
// false when the number ended before it (the byte is then read as what follows), or it is Bad.
bool JsonScanner::step_num(char c) {
  const bool d = is_digit(c);
  switch (sub_) {
    case kSign:
      if (d) return sub_ = c == '0' ? kZero : kInt, true;
      break;
    case kInt:
      if (d) return true;
      [[fallthrough]];
    case kZero:
      if (c == '.') return sub_ = kDot, true;
      [[fallthrough]];
    case kFrac:
      if (sub_ == kFrac && d) return true;
      if (c == 'e' || c == 'E') return sub_ = kE, true;
      return false;  // ends here
    case kDot:
      if (d) return sub_ = kFrac, true;
      break;
    case kE:
      if (c == '+' || c == '-') return sub_ = kESign, true;
      [[fallthrough]];
    case kESign:
      if (d) return sub_ = kExp, true;
      break;
    case kExp:
      return d;
  }
  status_ = Scan::Bad;
  return false;
}

Scan JsonScanner::feed(std::string_view s) {
  for (; status_ == Scan::More && at_ < s.size(); ++at_) {
    const char c = s[at_];
    switch (lex_) {
      case Lex::None:
        step_none(c, at_);
        break;
      case Lex::Str:
        if (c == '"') {
          lex_ = Lex::None;
          if (key_)
            want_ = Want::Colon;
          else
            value_done(at_ + 1);
        } else if (static_cast<unsigned char>(c) < 0x20) {
          status_ = Scan::Bad;  // raw control characters are invalid, as in JSON
        } else if (c == '\\') {
          lex_ = Lex::Esc;
        }
        break;
      case Lex::Esc:
        if (c == 'u') {
          lex_ = Lex::Hex;
          sub_ = 0;
        } else if (std::string_view("\"\\/bfnrt").find(c) != std::string_view::npos) {
          lex_ = Lex::Str;
        } else {
          status_ = Scan::Bad;
        }
        break;
      case Lex::Hex:
        if (!is_hex(c))
          status_ = Scan::Bad;
        else if (++sub_ == 4)
          lex_ = Lex::Str;
        break;
      case Lex::Lit:
        if (c != lit_[sub_]) {
          status_ = Scan::Bad;
        } else if (++sub_ == lit_.size()) {
          lex_ = Lex::None;
          value_done(at_ + 1);
        }
        break;
      case Lex::Num:
        if (step_num(c) || status_ == Scan::Bad) break;
        lex_ = Lex::None;
        if (!value_done(at_)) step_none(c, at_);
        break;
    }
  }
  // A scan that ended has not consumed the byte at at_ (the loop stops before ++at_ only for
  // More); nothing reads at_ after Done or Bad.
  return status_;
}

Scan scan_json_value(std::string_view s, size_t i, size_t* end) {
  JsonScanner sc(i);
  const Scan r = sc.feed(s);
  if (r == Scan::Done) *end = sc.end();
  return r;
}

}  // namespace minfer::server
