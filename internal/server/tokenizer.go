package server

// Tokenizer is what the server needs from internal/tokenizer. The coordinator adapts the real
// tokenizer (NewStreamDecoder and ApplyChatTemplate differ only in their types).
type Tokenizer interface {
	// Encode tokenizes text; addSpecial adds BOS (and EOS) as the model wants, parseSpecial
	// turns special-token text such as "<|im_end|>" into its id.
	Encode(text string, addSpecial, parseSpecial bool) []int32
	// Decode renders ids as text; DecodeChecked also fails on ids outside the vocabulary.
	Decode(ids []int32) string
	DecodeChecked(ids []int32) (string, error)
	// NewStreamDecoder returns a decoder that renders one token at a time.
	NewStreamDecoder() StreamDecoder
	// ApplyChatTemplate renders messages with the model's chat template.
	ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error)
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
}
