// End-to-end check of `minfer serve` with the official `openai` npm client (v4).
// usage: node openai_e2e.cjs NODE_MODULES_DIR BASE_URL API_KEY GOLDEN_PROMPT GOLDEN_EXPECTED
// The server runs stories260K with --chat-template chatml, -np 1, the given key. Every request
// has a timeout and the client does not retry. Exit 0 when every check passed.
'use strict';
const path = require('path');
const fs = require('fs');
const [modulesDir, baseURL, apiKey, promptFile, expectedFile] = process.argv.slice(2);
const OpenAI = require(path.join(modulesDir, 'openai'));

const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey, maxRetries: 0, timeout: 60000 });
const model = 'stories260K.gguf';
let checks = 0;
function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  checks++;
}
async function expectError(promise, status, what, type) {
  try {
    await promise;
  } catch (e) {
    check(e.status === status, `${what}: status ${e.status} (want ${status}): ${e.message}`);
    if (type) check(e.error && e.error.type === type, `${what}: type ${JSON.stringify(e.error)}`);
    return;
  }
  check(false, `${what}: no error`);
}

async function main() {
  const prompt = fs.readFileSync(promptFile, 'utf8');
  const expected = fs.readFileSync(expectedFile, 'utf8');

  const models = await client.models.list();
  check(models.data.some((m) => m.id === model), 'models.list names the model');

  // Greedy completion: starts with llama.cpp's golden continuation.
  const c = await client.completions.create({ model, prompt, max_tokens: 96, temperature: 0 });
  const text = c.choices[0].text;
  check(text.startsWith(expected), `golden text: got ${JSON.stringify(text.slice(0, 80))}`);
  check(c.object === 'text_completion', 'object');
  check(c.usage.completion_tokens === 96, `usage.completion_tokens ${c.usage.completion_tokens}`);
  check(c.usage.prompt_tokens === 5, `usage.prompt_tokens ${c.usage.prompt_tokens}`);
  check(c.choices[0].finish_reason === 'length', 'finish_reason length');

  // The same prompt again: its tokens come from the slot's cache.
  const again = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0 });
  check(again.usage.prompt_tokens_details.cached_tokens >= 4,
        `cached_tokens ${JSON.stringify(again.usage)}`);

  // Streaming gives the same text, chunk by chunk, and a usage chunk at the end.
  const stream = await client.completions.create({
    model, prompt, max_tokens: 32, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  let streamed = '', usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.choices.length) streamed += ch.choices[0].text;
    if (ch.usage) usage = ch.usage;
  }
  const whole = await client.completions.create({ model, prompt, max_tokens: 32, temperature: 0 });
  check(streamed === whole.choices[0].text, `stream == whole: ${JSON.stringify(streamed)}`);
  check(chunks > 5, `chunks ${chunks}`);
  check(usage && usage.completion_tokens === 32, `stream usage ${JSON.stringify(usage)}`);

  // Stop strings, streamed and not.
  const stopAt = expected.indexOf(' Lily');
  const s1 = await client.completions.create({ model, prompt, max_tokens: 64, temperature: 0, stop: [' Lily'] });
  check(s1.choices[0].text === expected.slice(0, stopAt), `stop: ${JSON.stringify(s1.choices[0].text)}`);
  check(s1.choices[0].finish_reason === 'stop', 'stop finish_reason');
  const s2 = await client.completions.create({ model, prompt, max_tokens: 64, temperature: 0,
                                               stop: ' Lily', stream: true });
  let s2text = '';
  for await (const ch of s2) if (ch.choices.length) s2text += ch.choices[0].text;
  check(s2text === expected.slice(0, stopAt), `stream stop: ${JSON.stringify(s2text)}`);

  // Chat (chatml template on a story model: the reply is a story, but the shape is checked).
  const chat = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Tell stories.' }, { role: 'user', content: 'Once' }],
    max_tokens: 16, temperature: 0, logprobs: true, top_logprobs: 2 });
  check(chat.object === 'chat.completion', 'chat object');
  check(chat.choices[0].message.role === 'assistant', 'chat role');
  check(typeof chat.choices[0].message.content === 'string', 'chat content');
  check(chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, 'chat usage');
  check(chat.choices[0].logprobs.content.length === chat.usage.completion_tokens, 'chat logprobs');
  const cs = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Once' }], max_tokens: 16, temperature: 0, stream: true });
  let chatStreamed = '', role = null, finish = null;
  for await (const ch of cs) {
    const d = ch.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) chatStreamed += d.content;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  check(role === 'assistant' && finish !== null, `chat stream role ${role} finish ${finish}`);

  // Seeded sampling is reproducible.
  const r1 = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 1, seed: 7 });
  const r2 = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 1, seed: 7 });
  check(r1.choices[0].text === r2.choices[0].text, 'same seed, same text');

  // Errors come back as the client's typed errors.
  await expectError(client.completions.create({ model, prompt, temperature: 'hot' }), 400, 'bad temperature');
  await expectError(client.completions.create({ model, prompt: 'x'.repeat(3000), max_tokens: 4 }),
                    400, 'prompt too long', 'exceed_context_size_error');
  const wrong = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'wrong', maxRetries: 0, timeout: 60000 });
  await expectError(wrong.completions.create({ model, prompt, max_tokens: 4 }), 401, 'wrong key');
  await expectError(client.chat.completions.create({ model, messages: [] }), 400, 'empty messages');
  console.log(`openai e2e: ${checks} checks passed`);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
