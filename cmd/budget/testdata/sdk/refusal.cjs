// One call with each official SDK, at its default settings, through the
// proxy (PROXY_URL) with a gateway key (GATEWAY_KEY). Prints one JSON line:
// for each SDK whether the call failed, its HTTP status and error code, and
// how long it took. ABORT_MS, when set, aborts a call after that many ms
// (for the test's control run, where the SDKs are expected to wait).
'use strict';
const { OpenAI } = require('openai');
const { Anthropic } = require('@anthropic-ai/sdk');

const base = process.env.PROXY_URL;
const apiKey = process.env.GATEWAY_KEY;
const abortMs = Number(process.env.ABORT_MS || 0);

async function attempt(sdk, call) {
  const opts = abortMs > 0 ? { signal: AbortSignal.timeout(abortMs) } : undefined;
  const start = performance.now();
  try {
    await call(opts);
    return { sdk, failed: false, ms: performance.now() - start };
  } catch (e) {
    const code = e.code ?? e.error?.code ?? e.error?.error?.code ?? null;
    return { sdk, failed: true, status: e.status ?? null, code, error: e.constructor.name, ms: performance.now() - start };
  }
}

(async () => {
  const openai = new OpenAI({ baseURL: base + '/v1', apiKey });
  const anthropic = new Anthropic({ baseURL: base, apiKey });
  const results = [
    await attempt('openai', (o) => openai.chat.completions.create(
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }, o)),
    await attempt('anthropic', (o) => anthropic.messages.create(
      { model: 'claude-sonnet-4-5', max_tokens: 256, messages: [{ role: 'user', content: 'hi' }] }, o)),
  ];
  console.log(JSON.stringify(results));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
