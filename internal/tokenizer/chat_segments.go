package tokenizer

import (
	"encoding/json"
	"sort"
	"strings"
)

// ChatSegment is where one part of a rendered chat begins: the system prompt, the tools, a
// message, or the generation prompt. A part runs to the next one's start.
type ChatSegment struct {
	Kind  string // "system", "tools", "message", "generation"
	Index int    // the message's index in msgs ("system" and "message")
	Role  string // the message's role
	Byte  int    // offset in the rendered text
}

// headerReach is how far before a message's content its role header is looked for.
const headerReach = 96

// ChatSegments locates the parts of rendered, which RenderChat made from msgs and tools
// (with the generation prompt when genPrompt). Templates interleave their own markup with
// the messages freely, so it finds each message's content in order, then its role header
// just before it (the run of markup touching the role name, such as "<|im_start|>user"), and
// the tools by their names. A part it cannot find is left out; offsets only grow. It is for
// explaining cache misses ("message 3 (user)"), not for parsing.
func ChatSegments(rendered string, msgs []ChatMessage, tools []json.RawMessage, genPrompt bool) []ChatSegment {
	var segs []ChatSegment
	cursor := 0
	for i, m := range msgs {
		text := messageText(m)
		if text == "" {
			continue
		}
		pos := strings.Index(rendered[cursor:], text)
		if pos < 0 {
			continue // the template rewrote it (trimmed, stripped a think block)
		}
		pos += cursor
		kind := "message"
		if m.Role == "system" || m.Role == "developer" {
			kind = "system"
		}
		segs = append(segs, ChatSegment{Kind: kind, Index: i, Role: m.Role, Byte: headerStart(rendered, cursor, pos, m.Role)})
		cursor = pos + len(text)
	}
	if first, ok := toolsStart(rendered, tools); ok {
		segs = append(segs, ChatSegment{Kind: "tools", Byte: first})
	}
	if genPrompt {
		if at := strings.LastIndex(rendered[cursor:], "assistant"); at >= 0 {
			segs = append(segs, ChatSegment{Kind: "generation", Role: "assistant", Byte: headerStart(rendered, cursor, cursor+at+len("assistant"), "assistant")})
		}
	}
	sort.SliceStable(segs, func(a, b int) bool { return segs[a].Byte < segs[b].Byte })
	return segs
}

// messageText is a piece of m's content to find in the rendering: its text (the first text
// part), else its first tool call's name.
func messageText(m ChatMessage) string {
	switch c := m.Content.(type) {
	case string:
		return strings.TrimSpace(c)
	case []ContentPart:
		for _, p := range c {
			if t := strings.TrimSpace(p.Text); t != "" {
				return t
			}
		}
	}
	if len(m.ToolCalls) > 0 {
		return m.ToolCalls[0].Name
	}
	return ""
}

// headerStart returns where the header of a message whose content starts at pos begins: at
// the last mention of role before pos (within headerReach, not before lo, any case), backed
// up over a special token written just before it ("<|im_start|>user") or else to the start
// of its line ("### User:"); pos itself when role is not there.
func headerStart(s string, lo, pos int, role string) int {
	from := max(lo, pos-headerReach)
	at := strings.LastIndex(strings.ToLower(s[from:pos]), strings.ToLower(role))
	if at < 0 {
		return pos
	}
	at += from
	if strings.HasSuffix(s[lo:at], "|>") {
		if open := strings.LastIndex(s[lo:at], "<|"); open >= 0 {
			return lo + open
		}
	}
	for at > lo && s[at-1] != '\n' {
		at--
	}
	return at
}

// toolsStart returns the start of the line holding the first tool's name.
func toolsStart(s string, tools []json.RawMessage) (int, bool) {
	if len(tools) == 0 {
		return 0, false
	}
	var t struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(tools[0], &t) != nil {
		return 0, false
	}
	name := t.Function.Name
	if name == "" {
		name = t.Name
	}
	if name == "" {
		return 0, false
	}
	at := strings.Index(s, `"`+name+`"`)
	if at < 0 {
		return 0, false
	}
	// Back to the start of the JSON value on that line (or the line).
	for at > 0 && s[at-1] != '\n' {
		at--
	}
	return at, true
}
