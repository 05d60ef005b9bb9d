// minfer embed: text embeddings, as llama.cpp's llama-embedding.
//
//   minfer embed -m FILE -p TEXT [--pooling none|mean|cls|last] [--normalize N] [-o FORMAT]
//
// The prompt is split at --embd-separator (default a newline); each part is one sequence,
// tokenized with BOS as the vocabulary says and control-token text recognised. Each runs
// through a graph Session built for embeddings (final-norm hidden states, no output head) in
// batches of at most -b tokens, flagging only the rows the pooling reads; the rows are pooled
// and normalized (model/pooling.h). Output on stdout (stderr: what was loaded):
//   text (default)  "embedding i: v v v ..." per vector, every value "%9.6f " (int16 range: "%6.0f
//   ") json            {"object": "list", "data": [{"object": "embedding", "index": i, "embedding":
//                   [...]}, ...]} (llama-embedding's --embd-output-format json)
//   array           [[...],[...]]
//   raw             one vector per line, values separated by spaces
// pooling none gives one vector per token. Bad flags throw Error(InvalidArgument) naming the
// flag and the value; a prompt longer than the context names its length and -c.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "engine_cli.h"
#include "model/pooling.h"

namespace minfer::app {

namespace {

struct EmbedOptions {
  EngineOptions engine;
  std::string prompt, prompt_file;
  std::string pooling;          // empty: the file's <arch>.pooling_type, else none
  std::string normalize = "2";  // euclidean, as llama-embedding
  std::string format = "text";  // text | json | array | raw
  std::string separator = "\n";
};

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = s.find(sep); !sep.empty() && at != std::string::npos; at = s.find(sep, start)) {
    parts.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

void print_vectors(const std::vector<float>& v, int64_t n_embd, const std::string& format,
                   int norm) {
  const auto e = static_cast<size_t>(n_embd);
  const size_t n = v.size() / e;
  std::string out;
  const bool json = format == "json";
  if (format == "json" || format == "array")
    out += json ? "{\n  \"object\": \"list\",\n  \"data\": [\n" : "[";
  for (size_t j = 0; j < n; ++j) {
    if (json)
      out += fmt::format(
          "    {{\n      \"object\": \"embedding\",\n      \"index\": {},\n"
          "      \"embedding\": ",
          j);
    if (format == "text") out += fmt::format("embedding {}: ", j);
    if (json || format == "array") out += '[';
    for (size_t i = 0; i < e; ++i) {
      const float x = v[j * e + i];
      if (format == "text") {
        out += norm == 0 ? fmt::format("{:6.0f} ", x) : fmt::format("{:9.6f} ", x);
      } else {
        if (i) out += format == "raw" ? " " : ",";
        out += norm == 0 ? fmt::format("{:.0f}", x) : fmt::format("{:.7f}", x);
      }
    }
    if (json) out += j + 1 < n ? "]\n    },\n" : "]\n    }\n";
    if (format == "array") out += j + 1 < n ? "]," : "]";
    if (format == "text" || format == "raw") out += '\n';
  }
  if (json) out += "  ]\n}\n";
  if (format == "array") out += "]\n";
  std::fputs(out.c_str(), stdout);
}

}  // namespace

int cmd_embed(int argc, char** argv) {
  EmbedOptions o;
  CLI::App app("minfer embed: text embeddings (llama-embedding)", "minfer embed");
  app.set_help_flag("-h,--help", "print this help and exit");
  add_engine_options(app, o.engine);
  auto* p = app.add_option("-p,--prompt", o.prompt, "text; one embedding per line (separator)");
  auto* f = app.add_option("-f,--file", o.prompt_file, "read the text from this file");
  p->excludes(f);
  app.add_option("--pooling", o.pooling,
                 "none | mean | cls | last (default: the file's pooling_type, else none)");
  app.add_option("--normalize,--embd-normalize", o.normalize,
                 "-1 none, 0 max-abs int16, 1 taxicab, 2 euclidean (default), >2 p-norm");
  app.add_option("-o,--embd-output-format", o.format, "text (default) | json | array | raw");
  app.add_option("--embd-separator", o.separator, "prompt separator (default a newline)");
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  if (p->count() == 0 && f->count() == 0)
    fail(ErrorKind::InvalidArgument, "give the text with -p TEXT or -f FILE");
  if (o.format != "text" && o.format != "json" && o.format != "array" && o.format != "raw")
    fail(ErrorKind::InvalidArgument, "-o '{}' is not an output format (text, json, array, raw)",
         o.format);
  if (o.separator.empty()) fail(ErrorKind::InvalidArgument, "--embd-separator must not be empty");
  const int norm = parse_normalize(o.normalize, "--normalize");
  const Pooling asked =
      o.pooling.empty() ? Pooling::Unspecified : parse_pooling(o.pooling, "--pooling");
  if (o.engine.exec != "graph")
    fail(ErrorKind::InvalidArgument, "--exec '{}': embeddings run in graph mode only",
         o.engine.exec);
  o.engine.embeddings = true;
  std::string text = f->count() ? read_prompt_file(o.prompt_file) : o.prompt;
  // As llama.cpp's -f: a file's final newline ends its last line, it does not start an empty one.
  if (f->count() && !text.empty() && text.back() == '\n') text.pop_back();

  LoadedEngine le = load_engine(o.engine, /*log=*/true);
  const Pooling pooling = resolve_pooling(asked, le.model->file());
  auto* seq = dynamic_cast<SeqEngine*>(le.engine.get());
  MINFER_ASSERT(seq != nullptr, "embed: the graph engine is a SeqEngine");
  const int64_t n_embd = le.model->hparams().n_embd;
  fmt::print(stderr, "minfer: pooling {}, normalize {}, n_embd {}\n", pooling_name(pooling), norm,
             n_embd);

  std::vector<float> all;
  const std::vector<std::string> prompts = split(text, o.separator);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> toks =
        le.tokenizer->tokenize(prompts[i], {.add_special = true, .parse_special = true});
    if (toks.empty())
      fail(ErrorKind::InvalidArgument, "prompt {} is empty (no tokens: the vocabulary adds no BOS)",
           i);
    if (static_cast<int64_t>(toks.size()) > seq->n_ctx_seq())
      fail(ErrorKind::InvalidArgument,
           "prompt {} is {} tokens, longer than the context of {} tokens (raise -c)", i,
           toks.size(), seq->n_ctx_seq());
    const std::vector<float> v = embed_sequence(*seq, 0, toks, pooling, norm, o.engine.n_batch);
    all.insert(all.end(), v.begin(), v.end());
  }
  print_vectors(all, n_embd, o.format, norm);
  return 0;
}

}  // namespace minfer::app
