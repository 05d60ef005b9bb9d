// minfer-bench-libs: minfer_server
// The tool-call parser (server/tool_calls.h) reading one call whose arguments are N bytes,
// pushed in 8-byte pieces as a model's tokens arrive (Hermes and Qwen's XML parameters; Gemma 4,
// LFM2, MiniMax M3, read whole once their closing marker is found; Llama 3.1's built-in call,
// whose end is a resumed bracket scan): the parser resumes its scans, so the time per byte
// stays flat as N grows (it grew with N when every push rescanned the call).
//   ./build/bench/bench_tool_calls
#include <benchmark/benchmark.h>

#include <string>

#include "server/tool_calls.h"

namespace {

using minfer::server::ToolCallFormat;
using minfer::server::ToolCallParser;

std::string hermes_call(size_t n) {
  std::string args = "{\"text\": \"";
  while (args.size() < n) args += "lorem ipsum \\\"dolor\\\" sit amet, ";
  args += "\", \"n\": [1, 2.5e3, true, null]}";
  return "<tool_call>\n{\"name\": \"write_file\", \"arguments\": " + args + "}\n</tool_call>";
}

std::string xml_call(size_t n) {
  std::string value;
  while (value.size() < n) value += "lorem ipsum <dolor> sit amet,\n";
  return "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n"
         "<parameter=text>\n" +
         value + "\n</parameter>\n</function>\n</tool_call>";
}

// A string argument of about n bytes, written raw by `wrap` (the formats' own quoting).
template <class Wrap>
std::string filler(size_t n, Wrap wrap) {
  std::string value;
  while (value.size() < n) value += "lorem ipsum dolor, sit amet. ";
  return wrap(value);
}

std::string more_call(ToolCallFormat f, size_t n) {
  const std::string ns = "]<]minimax[>[";
  switch (f) {
    case ToolCallFormat::Gemma4:
      return filler(n, [](const std::string& v) {
        return "<|tool_call>call:write_file{n:3,text:<|\"|>" + v + "<|\"|>}<tool_call|>";
      });
    case ToolCallFormat::Pythonic:
      return filler(n, [](const std::string& v) {
        return "<|tool_call_start|>[write_file(n=3, text='" + v + "')]<|tool_call_end|>";
      });
    case ToolCallFormat::MiniMaxXml:
      return filler(n, [&](const std::string& v) {
        return ns + "<tool_call>\n" + ns + "<invoke name=\"write_file\">" + ns + "<text>" + v + ns +
               "</text>" + ns + "</invoke>\n" + ns + "</tool_call>";
      });
    default:  // Llama 3.1's built-in call
      return filler(n, [](const std::string& v) {
        return "<|python_tag|>brave_search.call(query=\"" + v + "\")";
      });
  }
}

void run(benchmark::State& state, ToolCallFormat f, const std::string& text) {
  for (auto _ : state) {
    ToolCallParser p(f, true);
    size_t calls = 0;
    for (size_t i = 0; i < text.size(); i += 8) calls += p.push(text.substr(i, 8)).size();
    p.finish();
    benchmark::DoNotOptimize(calls);
    if (p.calls().size() != 1) state.SkipWithError("the call was not read");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_HermesArgumentsIn8BytePieces(benchmark::State& state) {
  run(state, ToolCallFormat::Hermes, hermes_call(static_cast<size_t>(state.range(0))));
}
BENCHMARK(BM_HermesArgumentsIn8BytePieces)->Arg(4 << 10)->Arg(16 << 10)->Arg(64 << 10);

void BM_QwenXmlParameterIn8BytePieces(benchmark::State& state) {
  run(state, ToolCallFormat::QwenXml, xml_call(static_cast<size_t>(state.range(0))));
}
BENCHMARK(BM_QwenXmlParameterIn8BytePieces)->Arg(4 << 10)->Arg(16 << 10)->Arg(64 << 10);

// Gemma 4 / LFM2 / MiniMax M3 / Llama 3.1 built-in: arguments of N bytes in 8-byte pieces.
void BM_MoreFormatsIn8BytePieces(benchmark::State& state) {
  const ToolCallFormat fs[] = {ToolCallFormat::Gemma4, ToolCallFormat::Pythonic,
                               ToolCallFormat::MiniMaxXml, ToolCallFormat::Llama3};
  const ToolCallFormat f = fs[state.range(0)];
  state.SetLabel(minfer::server::tool_call_format_name(f));
  run(state, f, more_call(f, static_cast<size_t>(state.range(1))));
}
BENCHMARK(BM_MoreFormatsIn8BytePieces)->ArgsProduct({{0, 1, 2, 3}, {4 << 10, 64 << 10}});

}  // namespace
