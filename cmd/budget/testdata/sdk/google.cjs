// The official @google/genai SDK through the proxy (PROXY_URL as its
// baseUrl, GATEWAY_KEY as its apiKey): a generateContent, a stream (the
// SDK asks for alt=sse) and, with REFUSE set, a call the budget refuses.
// Prints one JSON line with what the SDK got.
'use strict';
const { GoogleGenAI } = require('@google/genai');

(async () => {
  const ai = new GoogleGenAI({ apiKey: process.env.GATEWAY_KEY, httpOptions: { baseUrl: process.env.PROXY_URL } });
  const out = {};
  const res = await ai.models.generateContent({ model: 'gemini-2.5-flash', contents: 'hi', config: { maxOutputTokens: 5 } });
  out.text = res.text;
  out.usage = res.usageMetadata;
  const stream = await ai.models.generateContentStream({ model: 'gemini-2.5-flash', contents: 'hello there' });
  out.stream_text = '';
  for await (const chunk of stream) {
    out.stream_text += chunk.text ?? '';
    if (chunk.usageMetadata) out.stream_usage = chunk.usageMetadata;
  }
  if (process.env.REFUSE) {
    try {
      await ai.models.generateContent({ model: 'gemini-2.5-flash', contents: 'hi', config: { maxOutputTokens: 100000 } });
      out.refused = false;
    } catch (e) {
      out.refused = true;
      out.refusal_status = e.status;
      out.refusal_message = String(e.message);
    }
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
