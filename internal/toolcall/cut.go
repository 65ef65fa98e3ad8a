package toolcall

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// A forced answer (tool_choice "required" or a named function) is constrained by a grammar
// to calls written in the family's Envelope, so when max_tokens (or the KV pool) stops it
// early its text is a prefix of that envelope. Parse finds the whole calls in it and leaves
// the call it was writing as text; CutCalls reads that call, so that the answer can return
// what it has, as OpenAI does for a call cut by max_tokens: the call's name and the
// arguments written so far (not valid JSON). WholeMembers is what Anthropic returns as such
// a call's input: the members that were whole.

// paramOpen and paramClose are the tags the constrained grammar writes around each
// argument of a family whose arguments are not JSON (internal/server's argumentsGrammar):
// <parameter=NAME>\nVALUE\n</parameter>\n. A string value cannot hold '<' there, and a
// JSON value holds a raw newline only between tokens, where no '<' can follow, so the
// first paramClose ends the value.
const (
	paramOpen  = "<parameter="
	paramClose = "\n</parameter>\n"
)

// CutCalls reads text, a generation constrained to calls of family f (before, the frame's
// text ahead of the calls, then SectionBegin and the calls joined by Separator; see
// Envelope and Frame) that stopped before its end, and returns its calls: the whole ones,
// then last the call it was writing, with its name and the arguments written so far. ok
// is false when text stopped before that call's name was whole, after the last call was
// whole, or does not follow the envelope. Each call has an id, the family's own where it
// writes one, else opts.NewID's. Only opts.Tools (which names may be called) and
// opts.NewID are read. A family without an envelope is read as Hermes, as the grammar
// writes it.
//
// Parse finds the same whole calls, except where the family writes its calls as one JSON
// array (Llama 3, Mistral, Granite and the like): an array cut short holds no call for
// Parse, so a caller that streamed Parse's calls sends those of calls it has not sent.
//
// The arguments of a JSON family are the text as written. A family that writes tagged
// parameters gets the JSON they stand for, cut where the text stopped: the whole
// parameters typed by the tool's schema as Parse types them, then the cut one, a string
// value as written so far without its closing quote.
func CutCalls(f Family, text, before string, opts Options) (calls []Call, ok bool) {
	env, found := EnvelopeOf(f)
	if !found {
		env, _ = EnvelopeOf(Hermes)
	}
	newID := opts.NewID
	if newID == nil {
		newID = randomID
	}
	rest, found := strings.CutPrefix(text, before)
	if !found {
		return nil, false
	}
	if rest, found = strings.CutPrefix(rest, env.SectionBegin); !found {
		return nil, false
	}
	for k := 0; ; k++ {
		if k > 0 {
			if rest, found = strings.CutPrefix(rest, env.Separator); !found || rest == "" {
				return nil, false // stopped between calls, or not a call
			}
		}
		tool, begin := callBeginOf(env, rest, k, opts.Tools)
		if begin == 0 {
			return nil, false
		}
		rest = rest[begin:]
		var args string
		var n int
		var whole bool
		if env.ArgsAreJSON {
			args, n, whole = cutJSONArgs(rest)
		} else {
			args, n, whole = cutTaggedArgs(rest, tool.Parameters)
		}
		if n < 0 {
			return nil, false
		}
		id := ""
		if f == Kimi {
			id = "functions." + tool.Name + ":" + strconv.Itoa(k)
		} else {
			id = newID()
		}
		calls = append(calls, Call{ID: id, Name: tool.Name, Arguments: args})
		after := rest[n:]
		switch {
		case !whole: // stopped inside the arguments
		case strings.HasPrefix(after, env.CallEnd):
			rest = after[len(env.CallEnd):]
			continue // a whole call
		case !strings.HasPrefix(env.CallEnd, after):
			return nil, false
		}
		return calls, true // stopped inside the arguments or inside the call's end
	}
}

// callBeginOf finds the tool whose call k begins s, and the length of that beginning; 0
// when none does (or s stops inside it, before the name is known for sure).
func callBeginOf(env Envelope, s string, k int, tools []Tool) (Tool, int) {
	var best Tool
	n := 0
	for _, t := range tools {
		if b := env.CallBegin(t.Name, k); len(b) > n && strings.HasPrefix(s, b) {
			best, n = t, len(b)
		}
	}
	return best, n
}

// cutJSONArgs reads JSON arguments at the start of s: the arguments, their length and
// whole when they are whole (compacted, as Parse gives them), or the text as written and
// len(s) when s stops inside them; length -1 when s is not JSON arguments.
func cutJSONArgs(s string) (string, int, bool) {
	body := strings.TrimLeft(s, wsChars)
	if body == "" {
		return "", len(s), false
	}
	n, st := scanJSON(body)
	switch st {
	case needMore:
		return body[:len(body)-partialRune(body)], len(s), false
	case invalid:
		return "", -1, false
	}
	n += len(s) - len(body)
	args, ok := normArgs(s[:n])
	if !ok {
		return "", -1, false
	}
	return args, n, true
}

// cutTaggedArgs reads tagged parameters at the start of s (paramOpen NAME ">\n" VALUE
// paramClose, repeated): their JSON object, length and whole when they stop before
// something that is not a tag (the call's end), or the JSON so far and len(s) when s stops
// inside one. schema types the values.
func cutTaggedArgs(s string, schema json.RawMessage) (string, int, bool) {
	var a argsBuilder
	var types map[string]string
	typeOf := func(key string) string {
		if types == nil {
			types = schemaTypes(schema)
		}
		return types[key]
	}
	i := 0
	for {
		rest := s[i:]
		if !strings.HasPrefix(rest, paramOpen) {
			if rest != "" && strings.HasPrefix(paramOpen, rest) {
				return cutObject(&a, ""), len(s), false // stopped inside the tag
			}
			if rest == "" {
				if a.n == 0 {
					return "", len(s), false // nothing written yet
				}
				return cutObject(&a, ""), len(s), false // more may follow
			}
			return a.done(), i, true
		}
		head := rest[len(paramOpen):]
		gt := strings.Index(head, ">\n")
		if gt < 0 {
			return cutObject(&a, ""), len(s), false // stopped inside the name
		}
		key := head[:gt]
		value := head[gt+2:]
		end := strings.Index(value, paramClose)
		if end < 0 {
			// Stopped inside the value, or inside its closing tag.
			v := value[:len(value)-partialSuffix(value, []string{paramClose})]
			v = v[:len(v)-partialRune(v)]
			typ := typeOf(key)
			part := v
			if typ == "" || typ == "string" {
				part = strings.TrimSuffix(jsonString(v), `"`)
			}
			return cutObject(&a, jsonString(key)+":"+part), len(s), false
		}
		a.add(key, xmlValue(value[:end], typeOf(key)))
		i += len(paramOpen) + gt + 2 + end + len(paramClose)
	}
}

// cutObject is a's members so far and then member (when not empty), as an object not yet
// closed.
func cutObject(a *argsBuilder, member string) string {
	out := a.b.String()
	if a.n == 0 {
		out = "{"
	}
	if member != "" {
		if a.n > 0 {
			out += ","
		}
		out += member
	}
	return out
}

// WholeMembers is the JSON object of the members of a cut JSON object (args, a call's
// arguments as written so far) that were whole: each member whose value was followed by
// ',' or '}'. An args that is not the start of an object gives {}. Whole arguments give
// themselves, compacted.
func WholeMembers(args string) string {
	if a, ok := normArgs(args); ok {
		return a
	}
	dec := json.NewDecoder(strings.NewReader(args))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "{}"
	}
	var a argsBuilder
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		key, isKey := t.(string)
		if !isKey {
			break
		}
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			break
		}
		// A number or literal at the very end may be cut ("12" of 123, "tru" the decoder
		// has not seen end): such a value is whole once a ',' or '}' follows. A string,
		// object or array ends on its own closing byte.
		next := strings.TrimLeft(args[dec.InputOffset():], wsChars)
		last := raw[len(raw)-1]
		if next == "" && last != '"' && last != '}' && last != ']' || next != "" && next[0] != ',' && next[0] != '}' {
			break
		}
		var b bytes.Buffer
		_ = json.Compact(&b, raw) // raw came from the decoder: valid
		a.add(key, b.String())
	}
	return a.done()
}
