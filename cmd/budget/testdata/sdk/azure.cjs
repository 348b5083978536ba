// The official openai SDK's AzureOpenAI client through the proxy
// (PROXY_URL as its endpoint, GATEWAY_KEY as its api-key) against an Azure
// deployment "prod-4o": a chat completion, a stream without include_usage
// and an embedding. Prints one JSON line with what the SDK got.
'use strict';
const { AzureOpenAI } = require('openai');

(async () => {
  const client = new AzureOpenAI({ endpoint: process.env.PROXY_URL, apiKey: process.env.GATEWAY_KEY,
    apiVersion: '2024-10-21', deployment: 'prod-4o', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'hi' }];
  const chat = await client.chat.completions.create({ model: 'prod-4o', messages, max_tokens: 5 });
  const stream = await client.chat.completions.create({ model: 'prod-4o', messages, stream: true });
  let text = '';
  let streamUsage = false;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) streamUsage = true;
  }
  const emb = await client.embeddings.create({ model: 'prod-4o', input: 'hello there' });
  console.log(JSON.stringify({ chat_usage: chat.usage, stream_text: text, stream_usage: streamUsage, embedding_usage: emb.usage }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
