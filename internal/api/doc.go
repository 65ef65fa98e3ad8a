// Package api owns Stockpot's wire formats in three dialects: OpenAI's completions and chat
// completions, OpenAI's Responses, and Anthropic's Messages. For each it holds the request
// types with their parsing and validation, and the response, streaming-chunk and usage types;
// beside them the bodies of /tokenize, /detokenize and the cache admin API (prewarm), and the
// errors, in OpenAI's shape and translated to Anthropic's (AnthropicError).
//
// It does no I/O. The HTTP layer (internal/server) reads bodies, calls ParseCompletionRequest or
// ParseChatRequest, tokenizes, talks to the engine and writes the types defined here.
// ParseResponsesRequest reads a /v1/responses body, and ResponsesRequest.ChatRequest turns it
// into the ChatRequest it means (items folded into chat messages, flat tools nested, text.format
// as response_format), so that one set of chat checks and one generation path serve both.
// ParseMessagesRequest does the same for Anthropic's /v1/messages (blocks folded into chat
// messages, tool_choice any/tool as required/function), and validates cache_control
// breakpoints (ephemeral, ttl 5m or 1h, at most MaxCacheBreakpoints, never on an empty block).
//
// Parsing rules, the same for every endpoint:
//   - Unknown fields are ignored, as OpenAI and vLLM do, so clients written for either work.
//   - A known field with the wrong JSON type is a 400 whose message and param name the field.
//   - Union fields (prompt, stop, message content) are decoded by hand from json.RawMessage.
//   - Everything checkable without the tokenizer is checked here (ranges, n, echo, roles);
//     what needs the vocabulary or the context length (token ids, prompt length) is checked
//     by the server, which knows them.
//   - Absurd values are refused, not clamped: an empty stop string (it would end every
//     generation at once), top_k over MaxTopK, more than MaxStopTokenIDs stop_token_ids, a
//     cache_salt over MaxCacheSaltBytes.
//   - Invalid UTF-8 and lone UTF-16 surrogate escapes ("\ud800") in any string are accepted
//     and read as U+FFFD, one per invalid byte or lone surrogate: that is encoding/json's
//     decoding, and llama.cpp's server treats such input the same way. A client that sends
//     broken text gets the replacement character's tokens, not a 400.
//
// Every error returned by this package is an *Error carrying the HTTP status, OpenAI type,
// code and param, so the server writes it as-is (through AnthropicError on /v1/messages).
package api
