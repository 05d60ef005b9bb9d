// Tool calls read by the official `openai` npm client (v4), whole and streamed (its
// ChatCompletionStream assembles the tool_calls deltas), and sent back in a conversation.
// usage: node openai_tools.cjs NODE_MODULES_DIR BASE_URL
// The server (tests/server_tools_test.cpp) answers every chat request with the text of
// kTwoCalls: "I'll check." and calls get_weather {"city": "Paris"} and get_time {}.
// Every request has a timeout and the client does not retry. Exit 0 when every check passed.
'use strict';
const path = require('path');
const assert = require('assert');
const [modulesDir, baseURL] = process.argv.slice(2);
const OpenAI = require(path.join(modulesDir, 'openai'));

const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'none', maxRetries: 0, timeout: 30000 });
const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

function checkMessage(msg, what) {
  assert.strictEqual(msg.content, "I'll check.", what + ': content');
  assert.strictEqual(msg.tool_calls.length, 2, what + ': two calls');
  assert.deepStrictEqual(msg.tool_calls.map((c) => c.function.name), ['get_weather', 'get_time'], what);
  assert.deepStrictEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris' }, what);
  assert.deepStrictEqual(JSON.parse(msg.tool_calls[1].function.arguments), {}, what);
  for (const c of msg.tool_calls) {
    assert.match(c.id, /^call_[A-Za-z0-9]{24}$/, what + ': id');
    assert.strictEqual(c.type, 'function', what + ': type');
  }
}

async function main() {
  const whole = await client.chat.completions.create({ model: 'fake', messages, tools, temperature: 0 });
  assert.strictEqual(whole.choices[0].finish_reason, 'tool_calls');
  checkMessage(whole.choices[0].message, 'whole');

  // The client's own stream helper accumulates the deltas (index, id, name, argument pieces).
  const stream = client.beta.chat.completions.stream({ model: 'fake', messages, tools, temperature: 0 });
  let argumentDeltas = 0;
  stream.on('chunk', (chunk) => {
    const tc = chunk.choices[0] && chunk.choices[0].delta.tool_calls;
    if (tc && tc[0].function && tc[0].function.arguments) argumentDeltas++;
  });
  const streamed = await stream.finalChatCompletion();
  assert.strictEqual(streamed.choices[0].finish_reason, 'tool_calls');
  checkMessage(streamed.choices[0].message, 'streamed');
  assert.ok(argumentDeltas > 2, 'arguments streamed in pieces: ' + argumentDeltas);

  // The calls and their results go back as the next turn.
  const next = messages.concat([
    whole.choices[0].message,
    { role: 'tool', tool_call_id: whole.choices[0].message.tool_calls[0].id, content: '{"temp": 21}' },
    { role: 'tool', tool_call_id: whole.choices[0].message.tool_calls[1].id, content: '12:00' },
  ]);
  const again = await client.chat.completions.create({ model: 'fake', messages: next, tools, temperature: 0 });
  assert.strictEqual(again.choices[0].finish_reason, 'tool_calls');
  console.log('openai_tools: all checks passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
