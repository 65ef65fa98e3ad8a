// agents.mjs runs the OpenAI Agents SDK (unchanged, chat-completions model) against a
// Stockpot server and prints one JSON summary line. Usage:
//   STOCKPOT_BASE_URL=http://127.0.0.1:PORT/v1 node agents.mjs [tools|plain]
// tools: an agent with two tools over three runs of one conversation. Random weights never
//        pick a tool by themselves, so each run forces its first call (a named function,
//        then the other, then "required" with parallel_tool_calls false); the SDK then
//        resets tool_choice, and the next model call writes the answer. The second run
//        streams.
// plain: the same conversation shape without tools (checks the harness on any server).
import { load, installedVersion } from './load.mjs';
import { recorder, chatTurns, fail } from './wire.mjs';

const mode = process.argv[2] ?? 'tools';
const baseURL = process.env.STOCKPOT_BASE_URL;
const summary = { client: '@openai/agents', mode, ok: false, versions: {}, tool_runs: [], runs: [] };
if (!baseURL) fail(summary, 'STOCKPOT_BASE_URL is not set');

try {
  const agents = await load('@openai/agents');
  const { z } = await load('zod');
  const OpenAI = (await load('openai')).default;
  summary.versions = { '@openai/agents': installedVersion('@openai/agents'), openai: installedVersion('openai'), zod: installedVersion('zod'), node: process.version };
  const { Agent, run, tool, OpenAIChatCompletionsModel, setTracingDisabled, setOpenAIAPI, setDefaultOpenAIClient } = agents;
  setTracingDisabled(true); // the trace exporter would post to OpenAI's servers

  const wire = recorder();
  const client = new OpenAI({ baseURL, apiKey: process.env.STOCKPOT_API_KEY || 'unused', fetch: wire.fetch, maxRetries: 0 });
  setDefaultOpenAIClient(client);
  setOpenAIAPI('chat_completions');
  const models = await client.models.list();
  const modelID = models.data[0].id;
  summary.model = modelID;

  const cities = ['Paris', 'Oslo', 'Lima', 'Cairo'];
  const getWeather = tool({
    name: 'get_weather',
    description: 'Current weather in a city.',
    parameters: z.object({ city: z.enum(cities) }),
    execute: async ({ city }) => {
      summary.tool_runs.push({ tool: 'get_weather', args: { city } });
      return JSON.stringify({ city, celsius: 18, sky: 'clear' });
    },
  });
  const convert = tool({
    name: 'convert_temperature',
    description: 'Convert a Celsius temperature to another unit.',
    parameters: z.object({ celsius: z.number().int().min(-40).max(50), unit: z.enum(['F', 'K']) }),
    execute: async ({ celsius, unit }) => {
      summary.tool_runs.push({ tool: 'convert_temperature', args: { celsius, unit } });
      return String(unit === 'F' ? celsius * 9 / 5 + 32 : celsius + 273.15);
    },
  });

  const withTools = mode === 'tools';
  // maxTokens must fit a whole forced call: the server's grammar lets bounded JSON whitespace
  // (up to a newline and 20 spaces) stand in each slot of the call, and a random-weight model
  // takes it, so a two-property call can run to ~200 tokens (greedy runs here use ~60-100).
  // A call cut short comes back as text, not as a tool call.
  const base = new Agent({
    name: 'Forecaster',
    instructions: 'You answer weather questions. Use the tools for facts and reply in one short sentence.',
    model: new OpenAIChatCompletionsModel(client, modelID),
    tools: withTools ? [getWeather, convert] : [],
    modelSettings: { temperature: 0, maxTokens: 256 },
  });
  const plan = [
    { input: 'What is the weather in Paris?', toolChoice: 'get_weather', stream: false },
    { input: 'And what is that in Fahrenheit?', toolChoice: 'convert_temperature', stream: true },
    { input: 'Now check Oslo, please.', toolChoice: 'required', parallelToolCalls: false, stream: false },
  ];
  let history = [];
  for (const step of plan) {
    const settings = { ...base.modelSettings, toolChoice: step.toolChoice };
    if (step.parallelToolCalls !== undefined) settings.parallelToolCalls = step.parallelToolCalls;
    const agent = withTools ? base.clone({ modelSettings: settings }) : base;
    const input = [...history, { role: 'user', content: step.input }];
    const ranBefore = summary.tool_runs.length;
    let result;
    if (step.stream) {
      result = await run(agent, input, { stream: true, maxTurns: 4 });
      let events = 0;
      for await (const _ of result) events++;
      await result.completed;
      if (result.error) throw result.error;
      summary.stream_events = events;
    } else {
      result = await run(agent, input, { maxTurns: 4 });
    }
    history = result.history;
    summary.runs.push({
      input: step.input,
      tool_choice: withTools ? step.toolChoice : null,
      stream: step.stream,
      tool_runs: summary.tool_runs.length - ranBefore,
      model_calls: result.rawResponses.length,
      final_output: result.finalOutput,
      cached_tokens: result.rawResponses.map((r) => r.usage?.inputTokensDetails?.[0]?.cached_tokens ?? r.usage?.inputTokensDetails?.cached_tokens ?? null),
    });
  }
  await wire.done();
  summary.turns = chatTurns(wire.exchanges);
  summary.exchanges = wire.exchanges;
  summary.ok = true;
  console.log(JSON.stringify(summary));
} catch (e) {
  fail(summary, e);
}
