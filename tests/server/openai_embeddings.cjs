// `minfer serve --embeddings --pooling mean` on stories260K with the official `openai` npm
// client (v4), which asks for base64 by default and decodes it to float32.
// usage: node openai_embeddings.cjs NODE_MODULES_DIR BASE_URL GOLDEN_JSON
// GOLDEN_JSON: llama-embedding's vectors for the two inputs (tests/data/embed). Every request
// has a timeout and the client does not retry. Exit 0 when every check passed.
'use strict';
const path = require('path');
const fs = require('fs');
const [modulesDir, baseURL, goldenFile] = process.argv.slice(2);
const OpenAI = require(path.join(modulesDir, 'openai'));

const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'none', maxRetries: 0, timeout: 60000 });
const golden = JSON.parse(fs.readFileSync(goldenFile, 'utf8')).data.map((d) => d.embedding);
let checks = 0;
function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  checks++;
}
function maxDiff(a, b) {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

async function main() {
  const inputs = ['Once upon a time', 'The cat sat on the mat'];
  for (const encoding_format of [undefined, 'float', 'base64']) {
    const req = { model: 'stories260K.gguf', input: inputs };
    if (encoding_format) req.encoding_format = encoding_format;
    const r = await client.embeddings.create(req);
    check(r.object === 'list', 'object');
    check(r.data.length === 2, `two vectors (${encoding_format})`);
    check(r.usage.prompt_tokens === 15, `usage ${JSON.stringify(r.usage)}`);
    r.data.forEach((d, i) => {
      check(d.index === i, 'index');
      // Asked for base64, the client hands the string over as it came: the float32 bytes.
      let v = d.embedding;
      if (encoding_format === 'base64') {
        check(typeof v === 'string', `base64 is a string (${typeof v})`);
        const b = Buffer.from(v, 'base64');
        v = Array.from(new Float32Array(b.buffer, b.byteOffset, b.length / 4));
      }
      check(v.length === 64, `length ${v.length} (${encoding_format})`);
      const diff = maxDiff(v, golden[i]);
      check(diff < 2e-3, `vector ${i} (${encoding_format}) differs from llama.cpp by ${diff}`);
    });
  }
  const one = await client.embeddings.create({ model: 'x', input: 'Once upon a time' });
  check(one.data.length === 1 && maxDiff(one.data[0].embedding, golden[0]) < 2e-3, 'one string');
  try {
    await client.embeddings.create({ model: 'x', input: [] });
    check(false, 'empty input accepted');
  } catch (e) {
    check(e.status === 400, `empty input: status ${e.status}`);
  }
  console.log(`openai embeddings: ${checks} checks passed`);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
