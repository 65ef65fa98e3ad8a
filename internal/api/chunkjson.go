package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"unicode/utf8"
)

// A stream's token chunks differ only in their text: same id, created, model, fingerprint,
// one choice with nothing else set. Re-encoding the whole chunk with encoding/json per token
// was most of the server's per-token time, so a ChunkTemplate (the server's SSE writer keeps
// one per stream) encodes the first text chunk
// once with a marker where the text goes, keeps the bytes before and after it, and answers
// each later chunk of the same shape with head + the text as a JSON string + tail. Output is
// byte for byte what json.Marshal gives (TestChunkTemplateMatchesMarshal, FuzzAppendJSONString);
// a chunk of any other shape (logprobs, tool calls, token ids, the finish, usage) takes
// encoding/json.

// slotMarker stands for the text while the template is encoded: plain ASCII that encodes to
// itself, and that no id, model name or fingerprint contains (checked: it must occur once).
const slotMarker = "\x60stockpot-sse-text-slot\x60"

// chunkKey is everything a text chunk's encoding depends on besides its text. A chunk
// qualifies only when every other field is unset (nil), so equal keys mean equal bytes.
type chunkKey struct {
	kind                                 int // 1 chat, 2 completion
	id, object, model, fingerprint, role string
	created                              int64
	index                                int
}

// ChunkTemplate is the encoding of one chunk shape around its text. Its zero value is ready;
// one serves one stream (it is not safe for concurrent use).
type ChunkTemplate struct {
	key        chunkKey
	head, tail []byte
}

// textChunk returns v's key and text when v is a text chunk the template can encode.
func textChunk(v any) (k chunkKey, text string, ok bool) {
	if !templateFieldsKnown || NoChunkTemplates {
		return k, "", false
	}
	switch c := v.(type) {
	case *ChatCompletionChunk:
		if len(c.Choices) != 1 || c.Usage != nil || c.PromptTokenIDs != nil {
			return k, "", false
		}
		ch := &c.Choices[0]
		d := &ch.Delta
		if d.Content == nil || d.ReasoningContent != nil || d.ToolCalls != nil || ch.Logprobs != nil ||
			ch.FinishReason != nil || ch.TokenIDs != nil {
			return k, "", false
		}
		return chunkKey{1, c.ID, c.Object, c.Model, c.SystemFingerprint, d.Role, c.Created, ch.Index}, *d.Content, true
	case *CompletionResponse:
		if len(c.Choices) != 1 || c.Usage != nil || c.PromptTokenIDs != nil || c.KVTransferParams != nil {
			return k, "", false
		}
		ch := &c.Choices[0]
		if ch.Logprobs != nil || ch.FinishReason != nil || ch.TokenIDs != nil {
			return k, "", false
		}
		return chunkKey{2, c.ID, c.Object, c.Model, c.SystemFingerprint, "", c.Created, ch.Index}, ch.Text, true
	}
	return k, "", false
}

// build encodes k's chunk with the marker as its text and splits it there.
func (t *ChunkTemplate) build(k chunkKey) bool {
	var v any
	switch k.kind {
	case 1:
		m := slotMarker
		v = &ChatCompletionChunk{ID: k.id, Object: k.object, Created: k.created, Model: k.model, SystemFingerprint: k.fingerprint,
			Choices: []ChatChunkChoice{{Index: k.index, Delta: ChatDelta{Role: k.role, Content: &m}}}}
	case 2:
		v = &CompletionResponse{ID: k.id, Object: k.object, Created: k.created, Model: k.model, SystemFingerprint: k.fingerprint,
			Choices: []CompletionChoice{{Index: k.index, Text: slotMarker}}}
	}
	b, err := json.Marshal(v)
	quoted := []byte(`"` + slotMarker + `"`)
	if err != nil || bytes.Count(b, quoted) != 1 {
		t.key = chunkKey{}
		return false
	}
	i := bytes.Index(b, quoted)
	t.key, t.head, t.tail = k, b[:i], b[i+len(quoted):]
	return true
}

// AppendChunk appends v's JSON encoding to dst when v is a text chunk (ok=false otherwise),
// remaking the template when v's shape differs from the last one (the role-carrying first
// chunk, then the rest).
func (t *ChunkTemplate) AppendChunk(dst []byte, v any) ([]byte, bool) {
	k, text, ok := textChunk(v)
	if !ok || k != t.key && !t.build(k) {
		return dst, false
	}
	dst = append(dst, t.head...)
	dst = appendJSONString(dst, text)
	return append(dst, t.tail...), true
}

// NoChunkTemplates turns the template off (BenchmarkStream's encoding/json peer).
var NoChunkTemplates = false

// templateFieldsKnown: the chunk types have exactly the fields textChunk checks. A field
// added to them turns the fast path off (TestChunkTemplateFieldsKnown fails) rather than
// dropping the field from the stream.
var templateFieldsKnown = fieldsAre(ChatCompletionChunk{}, "ID", "Object", "Created", "Model", "SystemFingerprint", "Choices", "Usage", "PromptTokenIDs") &&
	fieldsAre(ChatChunkChoice{}, "Index", "Delta", "Logprobs", "FinishReason", "TokenIDs") &&
	fieldsAre(ChatDelta{}, "Role", "Content", "ReasoningContent", "ToolCalls") &&
	fieldsAre(CompletionResponse{}, "ID", "Object", "Created", "Model", "SystemFingerprint", "Choices", "Usage", "PromptTokenIDs", "KVTransferParams") &&
	fieldsAre(CompletionChoice{}, "Index", "Text", "Logprobs", "FinishReason", "TokenIDs") &&
	!hasMarshaler(ChatCompletionChunk{}, ChatChunkChoice{}, ChatDelta{}, CompletionResponse{}, CompletionChoice{})

func fieldsAre(v any, names ...string) bool {
	t := reflect.TypeOf(v)
	if t.NumField() != len(names) {
		return false
	}
	for i, n := range names {
		if t.Field(i).Name != n {
			return false
		}
	}
	return true
}

func hasMarshaler(vs ...any) bool {
	m := reflect.TypeFor[json.Marshaler]()
	for _, v := range vs {
		t := reflect.TypeOf(v)
		if t.Implements(m) || reflect.PointerTo(t).Implements(m) {
			return true
		}
	}
	return false
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as encoding/json writes a string (HTML escaping on): `"`, `\`
// and control bytes escaped (\b \f \n \r \t by name, others as \u00XX), <, > and & as \u00XX,
// invalid UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
