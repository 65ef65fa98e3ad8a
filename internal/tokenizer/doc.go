// Package tokenizer turns text into token ids and back exactly as llama.cpp
// does for the same GGUF tokenizer metadata, and renders chat templates.
//
// It owns one noun, Tokenizer, built by New from a Vocab (the
// tokenizer.ggml.* keys) or by FromGGUF. A Tokenizer is immutable and safe
// for concurrent use; StreamDecoder is per stream.
//
// # Encoding pipeline (llama_tokenize)
//
//  1. Special-token partition. Tokens of control, user-defined or unknown
//     type are searched for in the input, longest text first; each match
//     becomes that token and the text around it is tokenized on its own.
//     User-defined tokens always match; control and unknown ones only with
//     parseSpecial.
//  2. Each raw fragment is tokenized by the vocabulary's algorithm.
//  3. With addSpecial, BOS is prepended when add_bos is on and EOS appended
//     when add_eos is on. Defaults when the keys are absent: SPM add_bos,
//     byte-level BPE not, except the llama3 pre-tokenizer which adds BOS.
//
// # SentencePiece (tokenizer.ggml.model = "llama")
//
// Spaces become ▁ (U+2581); with add_space_prefix (default on) a space is
// put before the first fragment and before each fragment that follows a
// special token. The text is split into UTF-8 characters, and the adjacent
// pair whose concatenation is a token with the highest score is merged
// (ties: leftmost) until no pair is a token. Each resulting symbol that is
// not a token is re-split along the merges that built it, and what is still
// unknown is emitted byte by byte as <0xXX> tokens (byte fallback), or as
// UNK when the vocabulary has no byte tokens.
//
// # Byte-level BPE (tokenizer.ggml.model = "gpt2")
//
// A pre-tokenizer chosen by tokenizer.ggml.pre splits the text into words
// (pretokenize.go: llama3/llama-bpe, qwen2, qwen35, kimi-k2, smollm, gpt-2
// and default). The regexes llama.cpp names are implemented as streaming
// scanners over the text's bytes, decoding a codepoint where they stand, with
// llama.cpp's Unicode categories (Go's tables, patched to Unicode 15.1
// where llama.cpp's differ). Each word's UTF-8 bytes are mapped to printable
// codepoints (GPT-2's bytes_to_unicode) and merged pairwise by merge rank
// (lowest first, ties leftmost). With ignore_merges (llama3) a word that is
// already a token is taken whole. A final symbol that is not a token falls
// back to its bytes as one-byte tokens; bytes with no token are dropped.
//
// Invalid UTF-8 never fails: it is decoded as llama.cpp decodes it (an
// undecodable byte is one U+FFFD).
//
// # Budgets
//
// A server refuses prompts over the context length, and should not tokenize 15 MiB to learn
// that. EncodeLimit(text, ..., limit) returns Encode's tokens when there are at most limit,
// and stops early otherwise: a text of more than limit×MaxTokenBytes bytes is refused without
// tokenizing (no token stands for more input bytes than its own text has); the special-token
// partition stops past limit special tokens; byte-level BPE refuses a word the same bound
// says cannot fit before merging it and stops at the first word past the limit, and, since
// the pre-tokenizers stream (pretokenize.go), no word after it is even found; SPM, whose
// merge is global over a raw fragment, stops between fragments.
//
// Whatever the limit, the work is linear: each pre-tokenizer reads each byte a bounded
// number of times and holds only its position, and a merge (BPE word or SPM fragment) of n
// characters takes O(n log n) time on an indexed heap and 28 bytes a character, allocated
// once. EncodeBytesPerByte bounds the bytes allocated per byte of text; the tests count
// allocations and heap updates at n and 4n for every pre-tokenizer on runs of spaces,
// letters, digits, newlines, punctuation and one multi-byte rune, alternating classes and
// invalid UTF-8 (adversarial_test.go), never time.
//
// # Decoding
//
// Piece(id) is a token's raw bytes. Decode concatenates pieces as the
// llama.cpp server does for completions (token_to_piece with special=false):
// control and unknown tokens render as nothing, and nothing else is
// stripped or cleaned. StreamDecoder emits only complete UTF-8, turning
// bytes that can never complete into U+FFFD. It sits on every generated
// token's path, so a token of whole characters with nothing held comes back
// as its piece itself (a string over the piece bytes, which nothing writes
// after New): no allocation per token.
//
// # Chat templates
//
// RenderChat renders a conversation with the model's own Jinja template the
// way transformers' apply_chat_template does, with the message shaping of
// vLLM's OpenAI server: messages (role, content, tool_calls with arguments
// as dicts, tool_call_id, name, reasoning and reasoning_content, extra
// fields), tools (None without tools), add_generation_prompt, bos_token,
// eos_token, the request's kwargs (enable_thinking, ...), raise_exception
// (a *TemplateError, the HTTP 400) and strftime_now (RenderOptions.Now).
// Requests with tools use tokenizer.chat_template.tool_use when the GGUF has
// it. The engine is github.com/ardanlabs/jinja; chat_source.go prepares
// each source for it: Jinja2's whitespace control (trim_blocks,
// lstrip_blocks, - and +) is applied to the text beforehand, since the
// engine's own version strips text past expression tags, and `| tojson`
// is routed to tojsonFilter (json.dumps, ensure_ascii=False, key order
// kept). Source analyses pick how content arrays are passed (vLLM's
// "string" or "openai" detection) and whether tool-call arguments must stay
// JSON strings (templates that concatenate them). The text is checked
// against Jinja2 configured as transformers configures it and against
// @huggingface/jinja for every template in llama.cpp's models/templates
// (tools/jinjaref).
//
// Where Stockpot and Jinja2 part: Jinja2 raises on loops over None, on an
// undefined value used in + or some filters, on list.append in its
// immutable sandbox and on tojson of a generator; Stockpot renders (empty
// loop, "", the append, the list). A string added to a |safe string is not
// HTML-escaped. Content None is passed as "" (vLLM), not None
// (transformers): Qwen3's and others' templates fail on None.
//
// # Invariants
//
//   - Encode never panics, whatever the bytes.
//   - For byte-level BPE without special texts in the input,
//     Decode(Encode(s, false, false)) == s for valid UTF-8 s whose bytes
//     all have tokens (always true for a full 256-byte vocabulary).
//   - For SPM with byte tokens, Decode(Encode(s, false, false)) is s with
//     the one-space prefix when add_space_prefix is on.
//   - Digest changes whenever ids, rendered text or a chat template can.
//   - RenderChat never panics, whatever the template or the JSON values.
package tokenizer
