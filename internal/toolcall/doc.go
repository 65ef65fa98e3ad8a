// Package toolcall turns what a model generates into OpenAI tool calls: it finds the
// model family's call syntax from its chat template, and splits generated text into
// content, reasoning and calls, whole (Parse) or streamed (Parser), and writes calls back
// in the family's syntax (Format, EnvelopeOf). It is pure: no I/O, no goroutines.
//
// # Families
//
// Every model family writes calls its own way, and the chat template shows how: the
// template renders earlier assistant turns with their calls exactly as the model was
// trained to write them. Detect reads the template source for the markers each syntax
// uses, in the spirit of llama.cpp's chat layer (which matches the same markers before
// falling back to rendering the template twice and diffing). The families:
//
//	hermes        <tool_call>{"name": …, "arguments": {…}}</tool_call>   Hermes 2 Pro/3, Qwen2.5, QwQ, Qwen3, granite 4
//	qwen3-coder   <tool_call><function=f><parameter=k>v</parameter></function></tool_call>   Qwen3-Coder, Qwen3.5, Nemotron 3
//	glm           <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>   GLM 4.5+, Laguna
//	llama3        the whole message {"name": …, "parameters": {…}}, or after <|python_tag|>, incl. brave_search.call(query="…")
//	mistral       [TOOL_CALLS][{"name": …, "arguments": {…}}, …]          Mistral Nemo
//	mistral-args  [TOOL_CALLS]f[ARGS]{…}  ([CALL_ID]id kept as the id)  Mistral Small 3.2, Devstral, Ministral 3
//	deepseek-r1   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{…}\n```<｜tool▁call▁end｜>…
//	deepseek-v3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…   DeepSeek V3.1
//	kimi-k2       <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{…}<|tool_call_end|>…
//	kimi-k3       <|open|>tools<|sep|><|open|>call tool="f" …<|sep|>…<|close|>call<|sep|>…  (and think/response parts)
//	minimax-m2    <minimax:tool_call><invoke name="f"><parameter name="k">v</parameter></invoke></minimax:tool_call>
//	seed-oss      <seed:tool_call><function=f><parameter=k>v</parameter></function></seed:tool_call>
//	granite, apriel, firefunction, command-r: a JSON array of calls after <|tool_call|>,
//	              <tool_calls>, functools, <|START_ACTION|>
//	functionary   <function=f>{…}</function>                              functionary v3.1
//	none          no tool syntax in the template: content and reasoning only
//
// Markers such as <|python_tag|>, [TOOL_CALLS] or <｜tool▁calls▁begin｜> are special
// tokens: the text given to Parse must be detokenized with special tokens rendered (but
// without the end-of-turn token, where generation stopped).
//
// # One scanner, two ways in
//
// Parse is a Parser fed the whole text at once and finished. So "streaming gives what
// Parse gives" is not a second implementation to keep in step but one property of one
// scanner: it decides each piece of text only when no continuation could change the
// decision, and the same text in any chunking then yields deltas that Collect to the same
// Result. The tests check exactly that, for every golden text split at every byte, into
// single bytes and at random, and FuzzParse checks it for any text.
//
// The scanner walks a few modes (reasoning, content, call section). In content it looks
// for the family's markers; text that cannot be the start of a marker comes out at once,
// and a partial marker at the end of the text so far is held back. At a marker, the
// family's call parser says one of three things about the text from there on: complete
// (these calls, ending here), invalid (no continuation makes this a call) or needMore.
// Only complete and invalid are decisions, and parsers return them only when they are
// final: invalid comes from a byte that breaks the syntax, never from the text ending.
// A call therefore goes out only once it is whole and valid: first a delta with its
// index, id and name, then one with its arguments (all of them: they are known only when
// the call is). A call never turns out broken later.
//
// A waiting call is not parsed again on every feed: only when its closing literal
// arrives, or when it has grown by half (at least 16 bytes) since its last parse. Since
// a parser's complete and invalid hold for every continuation, skipping a parse can only
// make a decision come later, never differently; and the geometric rule keeps the work
// linear in the call's length (a 20 KB call fed in 4-byte pieces costs about what Parse
// of it costs, not a parse per piece).
//
// # What is a call
//
// Text that does not parse as a call of the family — bad JSON, an unknown structure, an
// unterminated call, a call naming a tool the request did not offer (when it offered
// any) — stays content, verbatim, marker included. A section of calls (DeepSeek, Kimi,
// MiniMax) whose first call is broken is content from its opening marker; after whole
// calls, a broken one ends the section and the rest is content. A generation that ends
// inside an open section keeps the calls it finished.
//
// Arguments are compact JSON text of an object. JSON arguments are kept as the model
// wrote them, minus insignificant whitespace (a JSON string holding an object is
// unquoted). XML-style values (qwen3-coder, glm, minimax-m2, seed-oss) are raw text: one
// newline each side is the template's, not the value's; the tool's JSON Schema types
// them (integer/number, boolean, null, object/array are parsed when they parse, else left
// strings), and without a schema they are strings, as in vLLM and llama.cpp. Kimi K3's
// argument tags name their value's JSON type themselves (type="string" and the text
// exactly as written, no newline trimmed; type="number" and the like with the value as
// JSON), so that attribute comes first and the schema only where it fails; its attribute
// values are unescaped (&quot; and &amp;), and a call may instead carry one JSON block.
//
// A forced answer (constrained to calls by a grammar written from the family's Envelope)
// that max_tokens stops is a prefix of that envelope: CutCalls reads the call it was
// writing, with the arguments so far, which Parse leaves as text (cut.go).
//
// Ids are the model's own where it writes one (Kimi's functions.f:0, Mistral's
// [CALL_ID] and "id"), else Options.NewID's, by default "call_" and 24 random letters.
//
// # Whitespace and reasoning
//
// Whitespace next to a call, a reasoning block or a wrapper marker is the template's
// layout, not content: where content lies on only one side it is dropped, where content
// lies on both sides one run of it is kept as the separator ("Checking.\n<tool_call>…
// </tool_call>\nDone." has content "Checking.\nDone."). Trailing whitespace of content
// is held until more content or a call shows which it is. Content elsewhere is kept
// verbatim, including trailing whitespace at the end.
//
// With ParseReasoning, a reasoning block at the start of the text (after optional
// whitespace) goes to Reasoning, trimmed; an unterminated block is all reasoning, and a
// text that starts with the closing marker had an empty one.
// StartsInReasoning is for prompts whose generation prompt opened the block
// (PromptOpensReasoning tells); a model that writes the opening marker again anyway is
// understood. Calls written inside the reasoning are reasoning, except for Kimi K2, whose
// thinking model calls tools from inside an unclosed block: its call section ends the
// reasoning.
//
// Kimi K3 writes a whole turn in tags: reasoning in a think channel (which the generation
// prompt opens, or the response channel when thinking is off), the answer in a response
// channel, calls in a tools section, then the message's close. The think channel is the
// reasoning block (the response opener also ends it, for a model that skips the closer);
// the response tags and the message's close are wrapper markers, dropped like Command R's.
//
// With Options.NoCalls (no tools offered, or tool_choice "none") the call markers are
// content, but the reasoning and wrapper markers are still read: a request without tools
// to a Kimi K3 model must still get its reasoning split and no channel tags as content.
package toolcall
