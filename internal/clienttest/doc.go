// Package clienttest holds no code, only tests: real client libraries, unchanged, talking to
// a real `stockpot serve`. A server that passes its own handler tests can still fail the
// clients people use (a null where a library wants a string, a tool-call delta without the
// index the accumulator keys on, usage on the wrong chunk), and only the libraries know what
// they accept. So each test builds the binary, starts it on a loopback port with the embedded
// default model, and drives one library through what an agent does: a tool loop over several
// turns, plain and streamed.
//
// # Clients
//
//   - github.com/openai/openai-go (the official Go SDK, a test dependency in go.mod): tool
//     calls non-streamed, and streamed through its ChatCompletionAccumulator.
//   - github.com/anthropics/anthropic-sdk-go (Messages) and openai-go's Responses client,
//     against the tiny-kimi-k3 preset (kimi-k3 architecture, Kimi's tokenizer with the
//     XTML control tokens, Kimi-K3's real template), synthesized by the binary under test
//     and served by it: Kimi-K3's markup parsed into calls, reasoning and content on all
//     three endpoints (kimik3_test.go).
//   - The OpenAI Agents SDK (@openai/agents, with its chat-completions model) and LangChain's
//     ChatOpenAI (@langchain/openai), run by the node scripts in tools/agentclients. Their
//     exact versions are pinned in that directory's package-lock.json and installed by
//     scripts/install-agentclients.sh (`make deps`) into .cache/agentclients
//     ($STOCKPOT_AGENTCLIENTS_DIR moves it). A missing install is a test failure, not a skip.
//     Each script prints one JSON summary: what its tools received, and every HTTP exchange
//     it made (request body, response body or stream chunks), recorded below the library.
//
// # What is checked
//
// Every exchange, whichever client made it, is checked against the OpenAI wire format
// (wire_test.go): tool calls carry ids, a "function" type, a name from the request's tools
// and arguments that are a JSON object valid against that tool's schema; the message content
// is null beside them; finish_reason is "tool_calls"; tool_choice "required" or a named
// function gets a call, "none" gets none; streamed tool calls assemble by index; usage has
// prompt_tokens_details.cached_tokens. On top, each test checks what its library made of it
// (parsed arguments, the tool functions actually run, the final answer).
//
// Cache reuse across turns: each request of a conversation extends the previous one's
// messages, so its prompt starts with the previous prompt's tokens (the chat template renders
// history as a prefix), and every full block of that prompt was stored. A later turn's
// cached_tokens is at least the previous prompt's full blocks, floor(prev/16)*16 with the
// server's block size 16 (checkCacheReuse); the numbers are logged.
//
// The embedded model has random weights: it never picks a tool by itself, so the tests force
// calls with tool_choice "required" or a named function (constrained decoding keeps the
// arguments valid) and bound the schemas (enums, integer ranges, short strings) so that
// random outputs end quickly. Sampling is greedy (temperature 0), so every run is the same.
package clienttest
