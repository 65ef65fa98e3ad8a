package pipeline

import (
	"encoding/json"
	"runtime"

	"stockpot/internal/api"
)

// Tokenizer is what a pipeline (and the generation runner after it) needs from
// internal/tokenizer; FromTokenizer adapts the real tokenizer (NewStreamDecoder and
// ApplyChatTemplate differ only in their types).
type Tokenizer interface {
	// Encode tokenizes text; addSpecial adds BOS (and EOS) as the model wants, parseSpecial
	// turns special-token text such as "<|im_end|>" into its id.
	Encode(text string, addSpecial, parseSpecial bool) []int32
	// Decode renders ids as text; DecodeChecked also fails on ids outside the vocabulary.
	Decode(ids []int32) string
	DecodeChecked(ids []int32) (string, error)
	// NewStreamDecoder returns a decoder that renders one token at a time.
	NewStreamDecoder() StreamDecoder
	// ApplyChatTemplate renders messages with the model's chat template (its tool-use
	// variant when opts has tools). An error is the template's, to quote to the client.
	ApplyChatTemplate(msgs []Message, opts ChatOptions) (string, error)
	// ChatTemplate returns the template source ApplyChatTemplate uses, with or without tools;
	// the tool-call syntax of the model family is detected from it.
	ChatTemplate(tools bool) string
	// Piece returns the bytes token id stands for (control tokens as their text).
	Piece(id int32) []byte
	// IsControl reports a control token (BOS, EOS, <|im_start|>...), never part of text.
	IsControl(id int32) bool
	// EOGs lists the end-of-generation tokens.
	EOGs() []int32
	VocabSize() int
	// IsEOG reports an end-of-generation token (EOS, EOT, <|im_end|>...).
	IsEOG(id int32) bool
	// AddBOS reports whether the model expects a BOS token at the start of a prompt.
	AddBOS() bool
}

// StreamDecoder renders a token stream as text. Add returns only complete UTF-8: bytes of a
// character split across tokens are held until the character completes. Flush returns what is
// held at the end of the stream.
type StreamDecoder interface {
	Add(id int32) string
	Flush() string
}

// Message is one chat message given to the chat template.
type Message struct {
	Role    string
	Content string
	// NullContent: the client sent content null (an assistant message with only tool calls).
	NullContent bool
	// Parts holds the text parts when the client sent content as a list of them; Content is
	// then their join with "\n".
	Parts      []string
	ToolCalls  []api.ToolCall // assistant; Arguments is JSON text
	ToolCallID string         // tool
	Name       string
	Reasoning  string // assistant's reasoning_content
}

// ChatOptions are the template's inputs besides the messages.
type ChatOptions struct {
	AddGenerationPrompt bool
	// Tools are the request's tool entries exactly as sent ({"type": "function", ...}).
	Tools []json.RawMessage
	// Kwargs are extra template variables (chat_template_kwargs: enable_thinking, ...).
	Kwargs map[string]any
}

// BigTokenizeBytes is the size from which a text takes a big-tokenize slot: 256 KiB is some 64K
// tokens of prose, a prompt whose tokenizing takes tens of milliseconds, where a slot's
// hand-off costs nothing by comparison.
const BigTokenizeBytes = 256 << 10

// BigTokenizeSlots is how many big texts a Pipeline tokenizes at once: half the cores the runtime
// uses, at least one, so that the other half stays free for the network and the engine.
func BigTokenizeSlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// limitedEncoder is the optional ability to tokenize within a budget, stopping early once the
// text is known to be over it (*tokenizer.Tokenizer has it). Without it the server encodes
// everything and counts.
type limitedEncoder interface {
	EncodeLimit(text string, addSpecial, parseSpecial bool, limit int) ([]int32, bool)
}

// EncodeLimit tokenizes text, or reports false once it has more than limit tokens. When it
// had to count them all (a Tokenizer without EncodeLimit) the ids come back anyway, so the
// caller can say how many there were.
//
// A text of BigTokenizeBytes or more first takes one of the pipeline's big-tokenize slots
// (BigTokenizeSlots): tokenizing 4 MiB takes seconds of one core and 28 bytes a character of
// its longest word, and ten of them at once on two cores left no core for the network, so
// the server's /health waited up to 14 s behind them (the hostile soak, small-kimi-k3). The wait needs no
// context: each holder is done in time linear in a text the body limit bounds, and the
// waiters are bounded by the request memory budget their bodies hold.
func (p *Pipeline) EncodeLimit(text string, addSpecial, parseSpecial bool, limit int) ([]int32, bool) {
	if len(text) >= BigTokenizeBytes {
		p.bigTokenize <- struct{}{}
		defer func() { <-p.bigTokenize }()
	}
	if le, ok := p.tok.(limitedEncoder); ok {
		return le.EncodeLimit(text, addSpecial, parseSpecial, limit)
	}
	ids := p.tok.Encode(text, addSpecial, parseSpecial)
	return ids, len(ids) <= limit
}

// TooManyTokens is the 400 for a text over a token budget, known without counting it all.
func (p *Pipeline) TooManyTokens(param string, limit int) error {
	if limit >= p.cfg.ContextLength-1 {
		return api.Invalid(param, "%s has more than %d tokens, but the model's context length is %d (the prompt must leave room for at least one generated token)", param, limit, p.cfg.ContextLength)
	}
	return api.Invalid(param, "%s has more than %d tokens, over this server's limit of %d (--max-prompt-tokens)", param, limit, limit)
}
