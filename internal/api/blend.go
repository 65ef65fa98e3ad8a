package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// BlendParams is the blend object of /v1/completions and /v1/chat/completions (Stockpot
// extension, package blend): chunks of the prompt, in prompt tokens, to cache on their own
// and blend wherever they appear.
type BlendParams struct {
	// Chunks are [start, end) spans of prompt tokens; nil when the object named none.
	Chunks [][2]int
	// Recompute is the fraction of chunk tokens recomputed, in [0, 1]; nil for the server's
	// default.
	Recompute *float64
	// Policy is "epic", "cacheblend" or "" (the server's default).
	Policy string
}

// MaxBlendChunksWire bounds the chunks array as parsed, before any model knowledge: far
// above the engine's bound (blend.DefaultMaxChunks), so that the engine's message, which
// names its bound, is the one a client sees, while a body of a million pairs is refused
// without building them.
const MaxBlendChunksWire = 4096

// ParseBlend decodes blend: absent or null is nil; otherwise an object with "chunks" (an
// array of [start, end] integer pairs), optional "recompute" (a number) and "policy" (a
// string), and nothing else. Ranges and overlaps are checked against the prompt later
// (blend.Spec.Validate). Errors are 400s naming blend. Chunks is nil when the object has
// none: a chat may mark its chunks on messages instead (BlendMark); the request's parser
// refuses a blend with nothing to blend.
func ParseBlend(raw json.RawMessage) (*BlendParams, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var w struct {
		Chunks    []json.RawMessage `json:"chunks"`
		Recompute *float64          `json:"recompute"`
		Policy    *string           `json:"policy"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, Invalid("blend", "blend must be an object {\"chunks\": [[start, end], ...], \"recompute\": 0.15, \"policy\": \"epic\"}: %v", err)
	}
	if dec.More() {
		return nil, Invalid("blend", "blend has trailing data after its object")
	}
	if len(w.Chunks) > MaxBlendChunksWire {
		return nil, Invalid("blend", "blend.chunks has %d spans, at most %d", len(w.Chunks), MaxBlendChunksWire)
	}
	p := &BlendParams{Recompute: w.Recompute}
	if w.Chunks != nil {
		p.Chunks = make([][2]int, len(w.Chunks))
	}
	for i, c := range w.Chunks {
		var pair []int
		if err := json.Unmarshal(c, &pair); err != nil || len(pair) != 2 {
			return nil, Invalid("blend", "blend.chunks[%d] must be a pair [start, end] of token offsets, got %s", i, clip(c))
		}
		p.Chunks[i] = [2]int{pair[0], pair[1]}
	}
	if w.Policy != nil {
		p.Policy = *w.Policy
	}
	return p, nil
}

// clip shortens raw JSON for an error message.
func clip(raw json.RawMessage) string {
	const n = 40
	if len(raw) > n {
		return fmt.Sprintf("%s...", raw[:n])
	}
	return string(raw)
}

// BlendReport is usage.cache.blend: each marked chunk in prompt order, and why the request
// was not blended when it was not ("kv_pool": no room for the chunks' blocks; its prompt was
// then computed in full).
type BlendReport struct {
	Chunks   []BlendChunkReport `json:"chunks"`
	Declined string             `json:"declined,omitempty"`
}

// BlendChunkReport is one chunk: hit_tokens were found in the chunk cache (the rest of its
// full blocks the request computed at position 0 and cached), blended_tokens kept the
// cached K/V. A chunk inside the reused prefix, or shorter than a block, has neither. Part
// names the chat part that marked it ("messages[2].content[1]", "system[1]"), absent for a
// chunk given as token offsets. RestoredTokens splits hit_tokens by the lower tier they were
// read from ("host", "disk", "remote"; absent when every hit was on the device).
type BlendChunkReport struct {
	Start          int            `json:"start"`
	End            int            `json:"end"`
	HitTokens      int            `json:"hit_tokens"`
	BlendedTokens  int            `json:"blended_tokens"`
	Part           string         `json:"part,omitempty"`
	RestoredTokens map[string]int `json:"restored_tokens,omitempty"`
}
