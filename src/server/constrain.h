// Constrained generation in the server: the request fields that carry a grammar, and the
// vocabulary index every grammar-constrained slot shares.
//
//   grammar          GBNF text (llama.cpp's field)
//   json_schema      a JSON schema object (llama.cpp's field)
//   response_format  {"type": "text"} | {"type": "json_object"[, "schema": {...}]} |
//                    {"type": "json_schema", "json_schema": {"schema": {...}, "name", "strict"}}
// At most one of them may constrain a request. The grammar is compiled while the request is
// parsed, so a bad grammar or an unsupported schema keyword is a 400 naming the field, the
// line and column (GBNF) or the keyword and its path (schema).
//
// Ownership: GenParams shares the compiled Grammar (shared_ptr<const>); GrammarVocab owns the
// lazily built VocabIndex and borrows the Tokenizer. Thread safety: parse_grammar_fields is
// pure; GrammarVocab::get is for the decode loop only. Failure: ApiError(400). Cost: compiling
// is linear in the grammar; the first constrained request builds the vocabulary trie once
// (docs/GRAMMAR.md).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grammar/token_filter.h"
#include "server/request.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

void parse_grammar_fields(const json& body, GenParams& g);

// tool_choice "required" (any of `tools`) or {"type": "function", "function": {"name"}} (that
// one; `only` is its name, empty for any): GBNF of the answer as format `f` writes calls, each
// {"name": "<fn>", "arguments" (llama3: "parameters"): <the tool's parameters schema>}, one
// call, or several when `parallel`. A tool whose schema the converter does not support, or
// that is none or not {"type": "object", ..}, takes any JSON object as arguments: the user wrote no
// grammar, so that is no 400. Mistral's marker is written as text: a vocabulary where [TOOL_CALLS]
// is only a control token cannot spell it (docs/SERVER.md "Limits"). Precondition: f != None,
// `only` is a tool's.
// `one_block`: only the format's first call block (the grammar of a lazy "auto", which
// constrains one block at a time). Tagged formats (tool_call_scan.h): the markers as the
// template writes them; JSON arguments per the schema; XML parameters' keys are the schema's
// property names and each value follows its property's schema (docs/SERVER.md "Tools": a
// string any text up to the closing tag, other types their JSON grammar).
std::string tool_call_gbnf(ToolCallFormat f, const json& tools, const std::string& only,
                           bool parallel, bool one_block = false);

// The text whose appearance starts a lazy tool-call grammar: the format's call opener; empty
// for Llama3 and None (no lazy grammar).
std::string_view lazy_trigger(ToolCallFormat f);

// Chat requests with tools and format f != None:
//   tool_choice "required" / a named function: r.gen.grammar = tool_call_gbnf's grammar, which
//     constrains the whole answer. Failure: ApiError(400) when r already carries grammar /
//     json_schema / response_format.
//   tool_choice "auto" or absent: unless r carries a grammar, a lazy grammar
//     (GenParams::grammar_trigger = lazy_trigger(f)): the answer is free until the opener
//     appears, then one call block is constrained, then it is free again.
// Otherwise leaves r as is.
void constrain_tool_choice(GenRequest& r, ToolCallFormat f);

// A chat answer whose grammar (a tool call's, lazy or strict, or json_schema /
// response_format) follows a reasoning model's thinking (`think`; `think_open`: the prompt
// opened it): sets r.gen.think / think_open and, for a strict grammar, wraps it so the thinking
// comes first, free, and the grammar constrains the answer from the close marker on
// (GenParams::think_start_grammar). Nothing changes, and false is returned, without a grammar
// or syntax, for the request's own GBNF (it describes the whole answer), or when thinking is
// off (chat_template_kwargs enable_thinking false, or a prompt that closed the thinking).
// Call it after the prompt is rendered (r.prompt_text). Failure: none. Cost: a copy of the
// grammar.
bool gate_grammar_on_thinking(GenRequest& r, const ReasoningSyntax& think, bool think_open);

// The grammar's view of a tokenizer's vocabulary: token pieces and end-of-generation ids, for
// logits rows of n_vocab (ids past the tokenizer's, a model's padding, are never allowed).
std::shared_ptr<const grammar::VocabIndex> make_grammar_vocab(const tok::Tokenizer& tk,
                                                              int32_t n_vocab);

class GrammarVocab {
 public:
  GrammarVocab(const tok::Tokenizer& tk, int32_t n_vocab) : tk_(tk), n_vocab_(n_vocab) {}
  const std::shared_ptr<const grammar::VocabIndex>& get() {
    if (!index_) index_ = make_grammar_vocab(tk_, n_vocab_);
    return index_;
  }

 private:
  const tok::Tokenizer& tk_;
  const int32_t n_vocab_;
  std::shared_ptr<const grammar::VocabIndex> index_;
};

namespace detail {
// constrain_more.cpp: the grammars of the formats in tool_call_formats_more.cpp. more_root:
// the root rule (and the rules its calls share), empty for other formats; more_call: tool i's
// call rule, for formats whose arguments are not JSON (json_arguments false), else empty.
bool json_arguments(ToolCallFormat f);
std::string more_root(ToolCallFormat f, bool parallel, bool one_block);
std::string more_call(ToolCallFormat f, size_t i, const std::string& name, const json& params,
                      std::string& rules);
// The members of tool i's call in the schema's order, each at most once, the required ones
// present: items[j] = (property j's expression, required), `sep` between two (empty: the items
// carry their own). Rules t<i>-first<j> (from property j on, none written yet) and t<i>-next<j>
// (after one) keep it linear, 2n rules of constant size, where a free order with each at most once
// needs an automaton over the subsets (2^n). Appends the rules; returns the expression ("" for
// no items).
std::string ordered_members(size_t i, const std::vector<std::pair<std::string, bool>>& items,
                            const std::string& sep, std::string& rules);
}  // namespace detail

}  // namespace minfer::server
