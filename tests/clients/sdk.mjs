// tests/clients/sdk.mjs: the official `openai`, `@anthropic-ai/sdk` and
// `@google/genai` npm packages against kvreplay serve: one non-streaming and
// one streaming call per endpoint (chat and text completions, the Responses
// API, Messages, Gemini's generateContent), each checked for what the SDK
// hands its user (text, usage, the cached-token counts). Usage: node sdk.mjs
// NODE_MODULES PORT
// Prints one line per check; exits 1 when any fails.
import { createRequire } from 'node:module';

const [modules, port] = process.argv.slice(2);
const require = createRequire(modules + '/');
const OpenAI = require('openai').default ?? require('openai');
const Anthropic = require('@anthropic-ai/sdk').default ?? require('@anthropic-ai/sdk');
const { GoogleGenAI } = require('@google/genai');

const base = `http://127.0.0.1:${port}`;
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'any', maxRetries: 0, timeout: 120000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'any', maxRetries: 0, timeout: 120000 });

let failed = 0;
async function check(name, fn) {
  try {
    const what = await fn();
    console.log(`ok   ${name}${what ? ': ' + what : ''}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
  }
}
function expect(cond, what) { if (!cond) throw new Error(what); }

const system = 'You are a terse assistant. '.repeat(12);
const chat = [{ role: 'system', content: system }, { role: 'user', content: 'Say hi.' }];

await check('openai models.list', async () => {
  const page = await openai.models.list();
  expect(page.data.length === 1 && page.data[0].id, 'one model with an id');
  return page.data[0].id;
});

await check('openai chat.completions.create', async () => {
  const r = await openai.chat.completions.create({ model: 'any', messages: chat, max_tokens: 8, logprobs: true, top_logprobs: 2 });
  expect(r.object === 'chat.completion', 'object chat.completion');
  expect(typeof r.choices[0].message.content === 'string', 'a message');
  expect(r.usage.prompt_tokens > 0 && r.usage.completion_tokens === 8, 'usage');
  expect(r.choices[0].logprobs.content.length === 8, 'a logprobs entry per token');
  return `${r.usage.prompt_tokens} prompt tokens, ${r.usage.prompt_tokens_details.cached_tokens} cached`;
});

await check('openai chat.completions.create stream', async () => {
  const s = await openai.chat.completions.create({ model: 'any', messages: chat, max_tokens: 8, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const c of s) {
    if (c.choices.length) { text += c.choices[0].delta.content ?? ''; finish = c.choices[0].finish_reason ?? finish; }
    if (c.usage) usage = c.usage;
  }
  expect(usage && usage.completion_tokens === 8, 'the usage chunk');
  expect(finish === 'length', 'finish_reason length');
  expect(usage.prompt_tokens_details.cached_tokens > 0, 'the same prompt again: cached tokens');
  return `${text.length} chars, ${usage.prompt_tokens_details.cached_tokens} cached`;
});

await check('openai completions.create', async () => {
  const r = await openai.completions.create({ model: 'any', prompt: 'Once upon a time', max_tokens: 5 });
  expect(r.object === 'text_completion' && typeof r.choices[0].text === 'string', 'a text completion');
  return JSON.stringify(r.choices[0].text);
});

await check('openai completions.create stream', async () => {
  const s = await openai.completions.create({ model: 'any', prompt: [1, 9038, 2501, 263, 931], max_tokens: 5, stream: true });
  let n = 0;
  for await (const c of s) if (c.choices.length && c.choices[0].text) n++;
  expect(n > 0, 'text chunks');
  return `${n} chunks`;
});

const messages = [{ role: 'user', content: 'Say hi.' }];
await check('anthropic messages.create', async () => {
  const r = await anthropic.messages.create({ model: 'claude-any', max_tokens: 8, system, messages });
  expect(r.type === 'message' && r.role === 'assistant', 'a message');
  expect(r.content.length === 1 && r.content[0].type === 'text', 'a text block');
  expect(r.usage.output_tokens === 8 && r.stop_reason === 'max_tokens', 'usage and stop_reason');
  return `${r.usage.input_tokens} input, ${r.usage.cache_read_input_tokens} cache read`;
});

await check('anthropic messages.stream', async () => {
  const s = anthropic.messages.stream({ model: 'claude-any', max_tokens: 8, system, messages });
  let deltas = 0;
  s.on('text', () => deltas++);
  const m = await s.finalMessage();
  expect(deltas > 0 && m.content[0].type === 'text', 'text deltas and a final message');
  expect(m.usage.cache_read_input_tokens > 0, 'the same prompt again: cache_read_input_tokens');
  return `${deltas} deltas, ${m.usage.cache_read_input_tokens} cache read`;
});

await check('anthropic messages.countTokens', async () => {
  const r = await anthropic.messages.countTokens({ model: 'claude-any', system, messages });
  expect(r.input_tokens > 0, 'input_tokens');
  return `${r.input_tokens} tokens`;
});

await check('anthropic error shape', async () => {
  try {
    await anthropic.messages.create({ model: 'claude-any', max_tokens: 8, messages: [{ role: 'robot', content: 'x' }] });
  } catch (e) {
    expect(e.status === 400 && e.error && e.error.type === 'error', 'a 400 in the Messages API error shape');
    return e.error.error.message;
  }
  throw new Error('no error');
});

// --- the Responses API (openai.responses) --------------------------------------
await check('openai responses.create', async () => {
  const r = await openai.responses.create({ model: 'any', instructions: system, input: 'Say hi.', max_output_tokens: 8,
                                            top_logprobs: 2, include: ['message.output_text.logprobs'] });
  expect(r.object === 'response' && r.output[0].type === 'message', 'a response with a message item');
  expect(typeof r.output_text === 'string' && r.output_text.length > 0, 'output_text');
  expect(r.status === 'incomplete' && r.incomplete_details.reason === 'max_output_tokens', 'status incomplete');
  expect(r.usage.output_tokens === 8 && r.usage.input_tokens > 0, 'usage');
  expect(r.output[0].content[0].logprobs.length === 8, 'a logprobs entry per token');
  return `${r.usage.input_tokens} input, ${r.usage.input_tokens_details.cached_tokens} cached`;
});

await check('openai responses.create stream', async () => {
  const s = await openai.responses.create({ model: 'any', instructions: system, input: 'Say hi.', max_output_tokens: 8,
                                            stream: true });
  let deltas = 0, last = null, seq = -1, inOrder = true;
  for await (const ev of s) {
    if (ev.sequence_number !== seq + 1) inOrder = false;
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') deltas++;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') last = ev.response;
  }
  expect(inOrder, 'sequence numbers in order');
  expect(deltas > 0 && last && last.usage.output_tokens === 8, 'text deltas and the final response');
  expect(last.usage.input_tokens_details.cached_tokens > 0, 'the same prompt again: cached tokens');
  return `${deltas} deltas, ${last.usage.input_tokens_details.cached_tokens} cached`;
});

await check('openai responses.create previous_response_id', async () => {
  const a = await openai.responses.create({ model: 'any', input: 'Say hi.', max_output_tokens: 4 });
  const b = await openai.responses.create({ model: 'any', previous_response_id: a.id, input: 'Again.', max_output_tokens: 4 });
  expect(b.previous_response_id === a.id, 'previous_response_id echoed');
  expect(b.usage.input_tokens > a.usage.input_tokens, 'the stored conversation came first');
  return `${a.usage.input_tokens} -> ${b.usage.input_tokens} input tokens`;
});

// --- the Gemini API (@google/genai) ------------------------------------------
const genai = new GoogleGenAI({ apiKey: 'any', httpOptions: { baseUrl: base } });
const gconfig = { systemInstruction: system, maxOutputTokens: 8 };
await check('genai models.generateContent', async () => {
  const r = await genai.models.generateContent({ model: 'gemini-2.5-flash', contents: 'Say hi.', config: gconfig });
  expect(typeof r.text === 'string' && r.text.length > 0, 'text');
  expect(r.candidates[0].finishReason === 'MAX_TOKENS', 'finishReason MAX_TOKENS');
  expect(r.usageMetadata.candidatesTokenCount === 8 && r.usageMetadata.promptTokenCount > 0, 'usageMetadata');
  return `${r.usageMetadata.promptTokenCount} prompt, ${r.usageMetadata.cachedContentTokenCount} cached`;
});

await check('genai models.generateContentStream', async () => {
  const s = await genai.models.generateContentStream({ model: 'gemini-2.5-flash', contents: 'Say hi.', config: gconfig });
  let chunks = 0, last = null;
  for await (const c of s) { chunks++; last = c; }
  expect(chunks > 1 && last.candidates[0].finishReason === 'MAX_TOKENS', 'chunks and a finish');
  expect(last.usageMetadata.cachedContentTokenCount > 0, 'the same prompt again: cachedContentTokenCount');
  return `${chunks} chunks, ${last.usageMetadata.cachedContentTokenCount} cached`;
});

await check('genai models.countTokens', async () => {
  const r = await genai.models.countTokens({ model: 'gemini-2.5-flash', contents: 'Say hi.' });
  expect(r.totalTokens > 0, 'totalTokens');
  return `${r.totalTokens} tokens`;
});

await check('genai error shape', async () => {
  try {
    await genai.models.generateContent({ model: 'gemini-2.5-flash', contents: [{ role: 'robot', parts: [{ text: 'x' }] }] });
  } catch (e) {
    expect(e.status === 400 && /INVALID_ARGUMENT/.test(e.message), 'a 400 in the Gemini error shape');
    return e.message.slice(0, 80);
  }
  throw new Error('no error');
});

process.exit(failed ? 1 : 0);
