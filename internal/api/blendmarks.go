package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// BlendMark is a chat text marked "blend": true (Stockpot extension, package blend): a
// message's whole content or one of its content parts on /v1/chat/completions, a text block
// on /v1/messages. The pipeline finds its tokens in the rendered prompt and blends them as
// one chunk, as if its token span were in blend.chunks.
type BlendMark struct {
	// Param names the marked field as the client wrote it ("messages[2].content[1]").
	Param string
	// Message is the index in ChatRequest.Messages of the message whose content holds Text.
	Message int
	// Text is the marked text, exactly as sent.
	Text string
}

// parseBlendFlag decodes a "blend" member of a message, part or block: absent, null or false
// is false; true is true; anything else is a 400 naming where.
func parseBlendFlag(raw json.RawMessage, where string) (bool, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("false")):
		return false, nil
	case bytes.Equal(raw, []byte("true")):
		return true, nil
	}
	return false, Invalid(where+".blend", "%s.blend must be true or false (it marks the text as one chunk to blend), got %s", where, clip(raw))
}

// collectBlendMarks gathers the chat request's marked messages and parts into r.BlendMarks,
// in message order; a message marked whole may not also mark its parts, and a marked text
// must not be empty.
func (r *ChatRequest) collectBlendMarks() error {
	for i := range r.Messages {
		m := &r.Messages[i]
		where := fmt.Sprintf("messages[%d]", i)
		whole, err := parseBlendFlag(m.Blend, where)
		if err != nil {
			return err
		}
		if whole {
			if len(m.blendParts) > 0 {
				return Invalid(where+".blend", "%s is marked blend and so are some of its content parts; mark one or the other", where)
			}
			if m.Text == "" {
				return Invalid(where+".blend", "%s is marked blend but has no text content to blend", where)
			}
			r.BlendMarks = append(r.BlendMarks, BlendMark{Param: where, Message: i, Text: m.Text})
			continue
		}
		for _, j := range m.blendParts {
			pw := fmt.Sprintf("%s.content[%d]", where, j)
			if m.Parts[j] == "" {
				return Invalid(pw+".blend", "%s is marked blend but its text is empty", pw)
			}
			r.BlendMarks = append(r.BlendMarks, BlendMark{Param: pw, Message: i, Text: m.Parts[j]})
		}
	}
	if r.BlendParams != nil && r.BlendParams.Chunks == nil && len(r.BlendMarks) == 0 {
		return noChunks()
	}
	if len(r.BlendMarks) > MaxBlendChunksWire {
		return Invalid("blend", "%d texts are marked blend, at most %d", len(r.BlendMarks), MaxBlendChunksWire)
	}
	return nil
}

// noChunks is the 400 for a blend object with nothing to blend.
func noChunks() error {
	return Invalid("blend", "blend.chunks is missing: mark at least one [start, end] span of prompt tokens (or, on a chat, a message or content part with \"blend\": true)")
}
