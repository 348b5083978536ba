// One call with each official SDK through the proxy (PROXY_URL) with a
// gateway key (GATEWAY_KEY), whole and streamed, reading the cost headers
// through the SDKs' raw-response API. Prints one JSON line: for each call
// its SDK, whether it streamed, the request id, X-Tokenbudget-Cost (null
// when absent), X-Tokenbudget-Charged-Tokens, the usage the SDK parsed
// and the text it got.
'use strict';
const { OpenAI } = require('openai');
const { Anthropic } = require('@anthropic-ai/sdk');

const base = process.env.PROXY_URL;
const apiKey = process.env.GATEWAY_KEY;

function headers(sdk, stream, response) {
  return {
    sdk, stream,
    request_id: response.headers.get('x-tokenbudget-request-id'),
    cost: response.headers.get('x-tokenbudget-cost'),
    tokens: response.headers.get('x-tokenbudget-charged-tokens'),
  };
}

(async () => {
  const openai = new OpenAI({ baseURL: base + '/v1', apiKey });
  const anthropic = new Anthropic({ baseURL: base, apiKey });
  const out = [];

  let r = await openai.chat.completions.create(
    { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  out.push({ ...headers('openai', false, r.response), usage: r.data.usage.total_tokens, text: r.data.choices[0].message.content });

  r = await openai.chat.completions.create(
    { model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  let text = '', usage = null;
  for await (const chunk of r.data) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage.total_tokens;
  }
  out.push({ ...headers('openai', true, r.response), usage, text });

  r = await anthropic.messages.create(
    { model: 'claude-sonnet-4-5', max_tokens: 256, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  out.push({ ...headers('anthropic', false, r.response), usage: r.data.usage.input_tokens + r.data.usage.output_tokens, text: r.data.content[0].text });

  r = await anthropic.messages.create(
    { model: 'claude-sonnet-4-5', max_tokens: 256, stream: true, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  text = ''; let input = 0, output = 0;
  for await (const ev of r.data) {
    if (ev.type === 'message_start') input = ev.message.usage.input_tokens;
    if (ev.type === 'message_delta') output = ev.usage.output_tokens;
    if (ev.type === 'content_block_delta') text += ev.delta.text ?? '';
  }
  out.push({ ...headers('anthropic', true, r.response), usage: input + output, text });

  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
