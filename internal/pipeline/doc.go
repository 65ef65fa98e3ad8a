// Package pipeline turns a parsed API request into what the engine runs: one chat message
// type, the small Tokenizer interface it needs, the model's chat template rendered (with
// tools and template kwargs), BOS and the length limits, the tool plan and the grammar that
// constrains the output, the prompt's segments for miss reports, and the retention pins.
//
// It exists so that a change to how a request becomes a prompt has one home, testable
// without HTTP: internal/server parses the dialects' bodies (internal/api) and writes their
// answers, internal/runner runs the Spec this package builds, and `stockpot lint` renders
// logged requests offline through RenderRequest exactly as serve does, with no server.
//
// What it owns:
//   - Tokenizer and StreamDecoder: what the request path needs of internal/tokenizer, which
//     FromTokenizer adapts. EncodeLimit tokenizes within a token budget, refusing a text the
//     budget cannot hold before tokenizing all of it; texts of 256 KiB or more take one of
//     half the cores' slots, so that tokenizing never starves the network and the engine.
//   - Pipeline.Prepare, Completion, ChatPrompt and Chat: validation against the vocabulary
//     and the context, the sampling parameters, and for chats the template rendering (BOS
//     prepended only when the template did not write it) and the Plan.
//   - Plan (plan.go): how the output is read. Tools rendered into the prompt by the model's
//     own template, tool calls parsed in the family's syntax (internal/toolcall), and
//     constrained decoding (response_format, tool_choice "required" or a named function) so
//     that what must be JSON is JSON that fits its schema by construction. A forced answer
//     cut short returns the call it was writing (cutcall.go).
//   - Grammars (grammars.go): each sized before it is built, cached by bytes, compiled once
//     however many ask, at most GrammarConfig.Compiles at a time, under grammar.Limits.
//   - Pins (pins.go): cache_control breakpoints and prompt_cache_retention as engine pins.
//   - RenderRequest and DialectOf (render.go): a logged body rendered as serve would.
//
// Errors are *api.Error, in the chat dialect's field names; the server renames them for the
// Responses and Messages dialects.
package pipeline
