package pipeline

import (
	"stockpot/internal/engine"
	"stockpot/internal/toolcall"
)

// A forced answer (tool_choice "required" or a named function; Anthropic's any or tool) that
// max_tokens or the KV pool stops before its end returns what it has, the same way in every
// dialect, as OpenAI does: the call it was writing, with its id, its name and the arguments
// text so far (not valid JSON), beside finish_reason "length". Responses marks that
// function_call item "incomplete" in an incomplete response; Messages returns the tool_use
// block with stop_reason "max_tokens", its input the members that were whole (what
// Anthropic returns), its input_json_delta events those already streamed. The parser never
// returns such a call (a call goes out only once it is whole), so the whole text is read
// again at the end with toolcall.CutCalls, which knows the envelope the grammar wrote.

// CutCalls returns the calls of a forced answer that stopped short (finish "length") with
// text: the whole ones, then last the call cut short; nil when the answer was not forced,
// did not stop short, or stopped before a call's name was written.
func (p *Plan) CutCalls(text, finish string) []toolcall.Call {
	if p == nil || !p.ForcedCalls || finish != engine.FinishLength {
		return nil
	}
	calls, ok := toolcall.CutCalls(p.Family, text, p.CallsBefore, p.Opts)
	if !ok {
		return nil
	}
	return calls
}

// WithCutCalls adds to parsed, the calls the parser found in a forced answer's text, those
// of CutCalls it lacks: the call cut short, and for a family that writes its calls as one
// JSON array (which the parser cannot read cut short) the whole ones before it too.
func (p *Plan) WithCutCalls(parsed []toolcall.Call, text, finish string) []toolcall.Call {
	if cut := p.CutCalls(text, finish); len(cut) > len(parsed) {
		return append(parsed, cut[len(parsed):]...)
	}
	return parsed
}

// CutDeltas is what a stream that sent sent calls (the parser's, through ds, the deltas of
// its Finish) still owes of CutCalls: each missing call as the parser streams one, a delta
// with its index, id and name, then one with its arguments.
func (p *Plan) CutDeltas(text, finish string, sent int, ds []toolcall.Delta) []toolcall.Delta {
	for _, d := range ds {
		if d.Call != nil && d.Call.ID != "" {
			sent++
		}
	}
	cut := p.CutCalls(text, finish)
	var out []toolcall.Delta
	for i := sent; i < len(cut); i++ {
		c := cut[i]
		out = append(out, toolcall.Delta{Call: &toolcall.CallDelta{Index: i, ID: c.ID, Name: c.Name}})
		if c.Arguments != "" {
			out = append(out, toolcall.Delta{Call: &toolcall.CallDelta{Index: i, Arguments: c.Arguments}})
		}
	}
	return out
}
