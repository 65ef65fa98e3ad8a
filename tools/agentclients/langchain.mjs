// langchain.mjs runs LangChain's ChatOpenAI (unchanged, chat completions) against a Stockpot
// server and prints one JSON summary line. Usage:
//   STOCKPOT_BASE_URL=http://127.0.0.1:PORT/v1 node langchain.mjs [tools|plain]
// tools: bindTools with tool_choice "required" returns an AIMessage whose parsed tool_calls
//        the script runs (tool.invoke makes the ToolMessage); the tool message round is then
//        answered with tool_choice "none". A second round does the same streamed with the
//        other tool named, the tool calls assembled from tool_call_chunks by concatenating
//        the chunks.
// plain: the same two rounds as plain chat (checks the harness on any server).
import { load, installedVersion } from './load.mjs';
import { recorder, chatTurns, fail } from './wire.mjs';

const mode = process.argv[2] ?? 'tools';
const baseURL = process.env.STOCKPOT_BASE_URL;
const summary = { client: '@langchain/openai', mode, ok: false, versions: {}, tool_runs: [], rounds: [] };
if (!baseURL) fail(summary, 'STOCKPOT_BASE_URL is not set');

try {
  const { ChatOpenAI } = await load('@langchain/openai');
  const { tool } = await load('@langchain/core/tools');
  const { HumanMessage, SystemMessage } = await load('@langchain/core/messages');
  const { z } = await load('zod');
  summary.versions = { '@langchain/openai': installedVersion('@langchain/openai'), '@langchain/core': installedVersion('@langchain/core'), openai: installedVersion('openai'), node: process.version };

  const wire = recorder();
  const modelsResp = await fetch(baseURL + '/models');
  const modelID = (await modelsResp.json()).data[0].id;
  summary.model = modelID;
  // maxTokens must fit a whole forced call: the server's grammar lets bounded JSON whitespace
  // (up to a newline and 20 spaces) stand in each slot of the call, and a random-weight model
  // takes it, so a two-property call can run to ~200 tokens (greedy runs here use ~60-100).
  // A call cut short comes back as text, not as a tool call.
  const llm = new ChatOpenAI({
    model: modelID,
    apiKey: process.env.STOCKPOT_API_KEY || 'unused',
    temperature: 0,
    maxTokens: 256,
    maxRetries: 0,
    configuration: { baseURL, fetch: wire.fetch },
  });

  const lookup = tool(async ({ sku, warehouse }) => {
    summary.tool_runs.push({ tool: 'lookup_stock', args: { sku, warehouse } });
    return JSON.stringify({ sku, warehouse, units: 42 });
  }, {
    name: 'lookup_stock',
    description: 'Units of a product in stock at a warehouse.',
    schema: z.object({ sku: z.string().min(3).max(8).describe('product code like ABC-123'), warehouse: z.enum(['north', 'south']) }),
  });
  const reorder = tool(async ({ sku, quantity }) => {
    summary.tool_runs.push({ tool: 'reorder', args: { sku, quantity } });
    return `ordered ${quantity} of ${sku}`;
  }, {
    name: 'reorder',
    description: 'Order more units of a product.',
    schema: z.object({ sku: z.string().min(3).max(8), quantity: z.number().int().min(1).max(99) }),
  });
  const tools = [lookup, reorder];
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  const withTools = mode === 'tools';
  const answer = withTools ? llm.bindTools(tools, { tool_choice: 'none' }) : llm;

  const messages = [new SystemMessage('You keep the stock room. Use the tools, then answer in one sentence.')];
  const plan = [
    { q: 'How many ABC-123 are in the north warehouse?', choice: 'required', stream: false },
    { q: 'Order more of it if we have under 50.', choice: 'reorder', stream: true },
  ];
  for (const { q, choice, stream } of plan) {
    const forced = withTools ? llm.bindTools(tools, { tool_choice: choice }) : llm;
    messages.push(new HumanMessage(q));
    let ai;
    if (stream) {
      for await (const chunk of await forced.stream(messages)) ai = ai ? ai.concat(chunk) : chunk;
    } else {
      ai = await forced.invoke(messages);
    }
    messages.push(ai);
    const round = { question: q, tool_choice: withTools ? choice : null, stream, tool_calls: ai.tool_calls ?? [], invalid_tool_calls: ai.invalid_tool_calls ?? [], content: ai.content };
    if (withTools) {
      for (const call of ai.tool_calls ?? []) {
        const t = byName[call.name];
        if (!t) throw new Error(`model called unknown tool ${call.name}`);
        const toolMessage = await t.invoke(call); // a ToolCall in gives a ToolMessage out
        round.tool_message = { tool_call_id: toolMessage.tool_call_id, content: toolMessage.content };
        messages.push(toolMessage);
      }
      let final;
      if (stream) {
        for await (const chunk of await answer.stream(messages)) final = final ? final.concat(chunk) : chunk;
      } else {
        final = await answer.invoke(messages);
      }
      messages.push(final);
      round.final = { content: final.content, tool_calls: final.tool_calls ?? [], usage: final.usage_metadata ?? null };
    }
    round.usage = ai.usage_metadata ?? null;
    summary.rounds.push(round);
  }
  await wire.done();
  summary.turns = chatTurns(wire.exchanges);
  summary.exchanges = wire.exchanges;
  summary.ok = true;
  console.log(JSON.stringify(summary));
} catch (e) {
  fail(summary, e);
}
