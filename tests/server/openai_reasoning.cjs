// A reasoning model's thinking read by the official `openai` npm client (v4): reasoning_content
// on the whole message and on the streamed deltas (the client passes fields it does not type
// through), before the content; then the message, reasoning_content included, sent back.
// usage: node openai_reasoning.cjs NODE_MODULES_DIR BASE_URL
// The server (tests/server_reasoning_test.cpp) answers every chat request with kThought:
// "<think>\nThe user greets me. <tool_call> is not a call here.\n</think>\n\nHello there!".
// Every request has a timeout and the client does not retry. Exit 0 when every check passed.
'use strict';
const path = require('path');
const assert = require('assert');
const [modulesDir, baseURL] = process.argv.slice(2);
const OpenAI = require(path.join(modulesDir, 'openai'));

const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'none', maxRetries: 0, timeout: 30000 });
const messages = [{ role: 'user', content: 'Hi' }];
const thought = 'The user greets me. <tool_call> is not a call here.';

async function main() {
  const whole = await client.chat.completions.create({ model: 'fake', messages, temperature: 0 });
  const msg = whole.choices[0].message;
  assert.strictEqual(msg.content, 'Hello there!');
  assert.strictEqual(msg.reasoning_content, thought);
  assert.strictEqual(whole.choices[0].finish_reason, 'stop');

  const stream = await client.chat.completions.create({ model: 'fake', messages, temperature: 0, stream: true });
  let reasoning = '';
  let content = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0] ? chunk.choices[0].delta : {};
    if (d.reasoning_content) {
      assert.strictEqual(content, '', 'reasoning after content');
      reasoning += d.reasoning_content;
    }
    if (d.content) content += d.content;
  }
  assert.strictEqual(reasoning, thought);
  assert.strictEqual(content, 'Hello there!');

  const again = await client.chat.completions.create({
    model: 'fake', messages: messages.concat([msg, { role: 'user', content: 'Again' }]), temperature: 0,
  });
  assert.strictEqual(again.choices[0].message.reasoning_content, thought);
  console.log('openai_reasoning: all checks passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
