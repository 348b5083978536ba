// The official @aws-sdk/client-bedrock-runtime through the proxy
// (PROXY_URL as its endpoint) with the gateway key as a Bedrock API key
// (AWS_BEARER_TOKEN_BEDROCK, which the SDK sends as a bearer token): a
// Converse, a ConverseStream (AWS event-stream) and, with REFUSE set, a
// call the budget refuses. Prints one JSON line with what the SDK got.
'use strict';
const { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } = require('@aws-sdk/client-bedrock-runtime');

(async () => {
  const client = new BedrockRuntimeClient({ region: 'us-east-1', endpoint: process.env.PROXY_URL, maxAttempts: 1 });
  const modelId = 'anthropic.claude-3-5-haiku-20241022-v1:0';
  const messages = [{ role: 'user', content: [{ text: 'hi' }] }];
  const out = {};
  const res = await client.send(new ConverseCommand({ modelId, messages, inferenceConfig: { maxTokens: 5 } }));
  out.text = res.output.message.content.map((c) => c.text ?? '').join('');
  out.usage = res.usage;
  const stream = await client.send(new ConverseStreamCommand({ modelId, messages: [{ role: 'user', content: [{ text: 'hello there' }] }] }));
  out.stream_text = '';
  for await (const ev of stream.stream) {
    if (ev.contentBlockDelta) out.stream_text += ev.contentBlockDelta.delta.text ?? '';
    if (ev.metadata) out.stream_usage = ev.metadata.usage;
  }
  if (process.env.REFUSE) {
    try {
      await client.send(new ConverseCommand({ modelId, messages, inferenceConfig: { maxTokens: 100000 } }));
      out.refused = false;
    } catch (e) {
      out.refused = true;
      out.refusal_name = e.name;
      out.refusal_status = e.$metadata?.httpStatusCode;
      out.refusal_message = String(e.message);
    }
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
