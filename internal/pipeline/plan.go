package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/grammar"
	"stockpot/internal/toolcall"
)

// Agents' chat requests: tools rendered into the prompt by the model's own template, tool
// calls parsed out of the generated text in the model family's syntax, and constrained
// decoding (response_format, tool_choice "required" or a named function) so that what must be
// JSON is JSON that fits its schema by construction.

// maxParallelCalls is how many calls one constrained answer may hold when parallel tool calls
// are allowed: enough for real agent turns, and it keeps the call grammar small.
const maxParallelCalls = 4

// Plan is how one chat request's output is read: parsed for tool calls and reasoning in the
// model family's syntax, and constrained when the request asked for JSON or forced a call.
type Plan struct {
	Family     toolcall.Family
	ParseCalls bool // tools present and tool_choice is not "none"
	// ForcedCalls: the output is constrained to calls (tool_choice required or named), so
	// text the parser leaves over can only be a call cut short by max_tokens, never content.
	ForcedCalls bool
	// CallsBefore is the family's markup ahead of forced calls (toolcall.Frame), where a
	// forced answer's text starts (CutCalls).
	CallsBefore string
	Reasoning   bool // the template knows think blocks
	// ControlText: the model's control tokens reach the parser as text (Spec.ControlText),
	// since calls are parsed or the family's reasoning markup is made of them.
	ControlText bool
	// Opts are the parser's options; a dialect may set Opts.NewID (Anthropic's toolu_ ids).
	Opts toolcall.Options
}

// Parsing reports whether the output goes through the tool-call / reasoning parser.
func (p *Plan) Parsing() bool { return p != nil && (p.ParseCalls || p.Reasoning) }

// templateCache remembers what toolcall.Inspect learned of each template source.
var templateCache sync.Map // template source -> toolcall.Template

func inspectTemplate(src string) toolcall.Template {
	if t, ok := templateCache.Load(src); ok {
		return t.(toolcall.Template)
	}
	t := toolcall.Inspect(src)
	templateCache.Store(src, t)
	return t
}

// MessagesOf converts parsed request messages for the template.
func MessagesOf(msgs []api.ChatRequestMessage) []Message {
	in := make([]Message, len(msgs))
	for i, m := range msgs {
		in[i] = Message{Role: m.Role, Content: m.Text, NullContent: !m.HasText, Parts: m.Parts,
			ToolCalls: m.Calls, ToolCallID: m.ToolCallID, Name: m.Name, Reasoning: m.Reasoned}
	}
	return in
}

// OptionsOf returns the template inputs of req.
func OptionsOf(req *api.ChatRequest) ChatOptions {
	o := ChatOptions{AddGenerationPrompt: req.GenerationPrompt(), Kwargs: req.ChatTemplateKwargs}
	for _, t := range req.ParsedTools {
		o.Tools = append(o.Tools, t.Raw)
	}
	return o
}

// PlanChat decides how the output of req is parsed and constrained, compiling (or finding)
// its grammar. prompt is the rendered template text (Chat plans with it).
func (p *Pipeline) PlanChat(ctx context.Context, req *api.ChatRequest, prompt string) (*Plan, engine.Constraint, error) {
	tmpl := inspectTemplate(p.tok.ChatTemplate(len(req.ParsedTools) > 0))
	plan := &Plan{Family: tmpl.Family}
	if plan.Family == toolcall.None {
		// A template without a tool syntax of its own: Hermes-style <tool_call> JSON is the
		// most common open format, and what the constrained path produces for it.
		plan.Family = toolcall.Hermes
	}
	plan.Reasoning = tmpl.Reasoning
	plan.ParseCalls = len(req.ParsedTools) > 0 && req.ParsedToolChoice.Mode != api.ToolChoiceNone
	plan.Opts = toolcall.Options{ParseReasoning: plan.Reasoning,
		StartsInReasoning: plan.Reasoning && toolcall.PromptOpensReasoning(plan.Family, prompt),
		NoCalls:           !plan.ParseCalls}
	plan.ControlText = plan.ParseCalls || (plan.Parsing() && p.controlMarkup(plan.Family))
	for _, t := range req.ParsedTools {
		if req.ParsedToolChoice.Callable(t.Name) {
			plan.Opts.Tools = append(plan.Opts.Tools, toolcall.Tool{Name: t.Name, Parameters: t.Parameters})
		}
	}

	var build func() (grammar.Node, error)
	admit := func() error { return nil } // sizes the schemas before anything is built (grammars.go)
	gcfg := p.cfg.Grammar.withDefaults()
	lim := gcfg.limits()
	frame := toolcall.FrameOf(plan.Family, prompt, plan.Opts.StartsInReasoning)
	key := grammarKey{family: plan.Family}
	switch {
	case req.Format != nil && req.Format.Type == api.FormatJSONObject:
		key.kind = "json_object"
		key.before, key.after = frame.ContentBefore, frame.ContentAfter
		build = func() (grammar.Node, error) { return grammar.JSONObject(), nil }
	case req.Format != nil && req.Format.Type == api.FormatJSONSchema:
		key.kind, key.spec = "json_schema", fmt.Sprintf("%v|%s", req.Format.Strict, req.Format.Schema)
		key.before, key.after = frame.ContentBefore, frame.ContentAfter
		const param = "response_format.json_schema.schema"
		opt := grammar.SchemaOptions{Strict: req.Format.Strict, Limits: lim}
		admit = func() error {
			est, err := grammar.EstimateSchema(req.Format.Schema, opt)
			if err == nil {
				err = lim.Admit(est + grammar.EstimateLiteral(len(key.before)+len(key.after)))
			}
			return schemaError(param, err)
		}
		build = func() (grammar.Node, error) {
			n, err := grammar.JSONSchemaWith(req.Format.Schema, opt)
			if err != nil {
				return grammar.Node{}, schemaError(param, err)
			}
			return n, nil
		}
	case req.ParsedToolChoice.Mode == api.ToolChoiceRequired || req.ParsedToolChoice.Mode == api.ToolChoiceFunction:
		plan.ForcedCalls, plan.CallsBefore = true, frame.CallsBefore
		var b strings.Builder
		fmt.Fprintf(&b, "%v", req.ParallelCalls())
		for _, t := range req.ParsedTools {
			fmt.Fprintf(&b, "|%s|%v|%v|%s", t.Name, req.ParsedToolChoice.Callable(t.Name), t.Strict, t.Parameters)
		}
		key.kind, key.spec = "tools", b.String()
		key.before, key.after = frame.CallsBefore, frame.CallsAfter
		admit = func() error {
			return admitTools(req.ParsedTools, req.ParsedToolChoice, lim, len(key.before)+len(key.after))
		}
		build = func() (grammar.Node, error) {
			return callsGrammar(plan.Family, req.ParsedTools, req.ParsedToolChoice, req.ParallelCalls(), lim)
		}
	default:
		return plan, nil, nil
	}
	g, err := p.grammars.get(ctx, gcfg, key, admit, func() (*grammar.Grammar, error) {
		root, err := build()
		if err != nil {
			return nil, err
		}
		// The family's markup around the answer (toolcall.Frame): a think block the prompt
		// opened is closed at once, so that the constrained answer is the answer and not
		// the reasoning; Kimi K3's answer sits in its response channel.
		root = grammar.Seq(grammar.Literal(key.before), root, grammar.Literal(key.after))
		g, err := grammar.CompileWith(root, lim)
		if be, ok := err.(*grammar.BudgetError); ok {
			return nil, grammarBudgetError(grammarParam(key.kind), be)
		}
		if err != nil {
			return nil, api.Invalid("", "cannot build the grammar for constrained decoding: %v", err)
		}
		return g, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return plan, g.NewMatcher(p.grammarVocab()), nil
}

// schemaError turns a grammar error about a schema into a 400 naming param (nil stays nil).
func schemaError(param string, err error) error {
	if err == nil {
		return nil
	}
	if be, ok := err.(*grammar.BudgetError); ok {
		return grammarBudgetError(param, be)
	}
	var ue *grammar.UnsupportedError
	if errors.As(err, &ue) {
		e := api.Unsupported(param, "%s: %v (constrained decoding does not support it)", param, err)
		return e
	}
	return api.Invalid(param, "%s: %v", param, err)
}

// callsGrammar is the grammar of a tool-call answer in family's syntax: one call (of a tool
// the choice allows), or up to maxParallelCalls when parallel calls are allowed and the choice
// does not name one function, each with arguments valid against the tool's parameters.
func callsGrammar(family toolcall.Family, tools []api.Tool, choice api.ToolChoice, parallel bool, lim grammar.Limits) (grammar.Node, error) {
	env, ok := toolcall.EnvelopeOf(family)
	if !ok {
		env, _ = toolcall.EnvelopeOf(toolcall.Hermes)
	}
	var chosen []int
	for i, t := range tools {
		if choice.Callable(t.Name) {
			chosen = append(chosen, i)
		}
	}
	only := ""
	if choice.Mode == api.ToolChoiceFunction {
		only = choice.Name
	}
	args := make([]grammar.Node, len(tools))
	for _, i := range chosen {
		n, err := argumentsGrammar(env, tools[i], lim)
		if err != nil {
			return grammar.Node{}, schemaError(fmt.Sprintf("tools[%d].function.parameters", i), err)
		}
		args[i] = n
	}
	call := func(k int) grammar.Node {
		alts := make([]grammar.Node, 0, len(chosen))
		for _, i := range chosen {
			alts = append(alts, grammar.Seq(grammar.Literal(env.CallBegin(tools[i].Name, k)), args[i], grammar.Literal(env.CallEnd)))
		}
		return grammar.Alt(alts...)
	}
	n := 1
	if parallel && only == "" {
		n = maxParallelCalls
	}
	// call(0) [sep call(1) [sep call(2) ...]]: each further call is optional.
	tail := grammar.Seq()
	for k := n - 1; k >= 1; k-- {
		tail = grammar.Optional(grammar.Seq(grammar.Literal(env.Separator), call(k), tail))
	}
	parts := []grammar.Node{grammar.Literal(env.SectionBegin), call(0), tail}
	parts = append(parts, grammar.Literal(env.SectionEnd))
	return grammar.Seq(parts...), nil
}

// argumentsGrammar is the grammar of one call's arguments: a JSON object valid against the
// tool's parameters, or, for families that write arguments as tagged parameters
// (Qwen3-Coder's <parameter=name>value</parameter>), those tags in schema order.
func argumentsGrammar(env toolcall.Envelope, t api.Tool, lim grammar.Limits) (grammar.Node, error) {
	if env.ArgsAreJSON {
		if t.Parameters == nil {
			return grammar.JSONObject(), nil
		}
		return grammar.JSONSchemaWith(t.Parameters, grammar.SchemaOptions{Strict: t.Strict, Limits: lim})
	}
	props, err := schemaProperties(t.Parameters)
	if err != nil {
		return grammar.Node{}, err
	}
	parts := []grammar.Node{}
	for _, p := range props {
		var value grammar.Node
		if p.isString {
			value = grammar.CharsExcept("<", 1, p.maxLength)
		} else {
			v, err := grammar.JSONSchemaWith(p.schema, grammar.SchemaOptions{Limits: lim})
			if err != nil {
				return grammar.Node{}, err
			}
			value = v
		}
		tag := grammar.Seq(grammar.Literal("<parameter="+p.name+">\n"), value, grammar.Literal("\n</parameter>\n"))
		if !p.required {
			tag = grammar.Optional(tag)
		}
		parts = append(parts, tag)
	}
	if len(parts) == 0 {
		return grammar.Literal(""), nil
	}
	return grammar.Seq(parts...), nil
}

// schemaProperty is one property of an object schema, in the schema's own order.
type schemaProperty struct {
	name      string
	schema    json.RawMessage
	required  bool
	isString  bool
	maxLength int
}

// defaultTextParameter bounds a free-text parameter value without maxLength, so that a
// constrained call always ends.
const defaultTextParameter = 256

// schemaProperties lists the properties of an object schema in the order they are written.
func schemaProperties(schema json.RawMessage) ([]schemaProperty, error) {
	if len(schema) == 0 {
		return nil, nil
	}
	var top struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(schema, &top); err != nil {
		return nil, err
	}
	if len(top.Properties) == 0 {
		return nil, nil
	}
	req := map[string]bool{}
	for _, r := range top.Required {
		req[r] = true
	}
	d := json.NewDecoder(bytes.NewReader(top.Properties))
	if _, err := d.Token(); err != nil { // {
		return nil, err
	}
	var out []schemaProperty
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return nil, err
		}
		name, _ := k.(string)
		p := schemaProperty{name: name, schema: raw, required: req[name], maxLength: defaultTextParameter}
		var sub struct {
			Type      any  `json:"type"`
			MaxLength *int `json:"maxLength"`
			Enum      any  `json:"enum"`
		}
		_ = json.Unmarshal(raw, &sub)
		if t, ok := sub.Type.(string); ok && t == "string" && sub.Enum == nil {
			p.isString = true
			if sub.MaxLength != nil && *sub.MaxLength > 0 {
				p.maxLength = *sub.MaxLength
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// grammarVocab is the model's vocabulary for token masks, built on first use. Control tokens
// are never allowed, except those the model's own tool-call envelope writes (Mistral's
// [TOOL_CALLS], Kimi's section markers): the grammar's literals then match them as the model
// was trained to write them, and the parser reads them back as text (Spec.ControlText).
func (p *Pipeline) grammarVocab() *grammar.Vocab {
	p.vocabOnce.Do(func() {
		var envelope strings.Builder
		for _, tools := range []bool{false, true} {
			f := inspectTemplate(p.tok.ChatTemplate(tools)).Family
			if env, ok := toolcall.EnvelopeOf(f); ok {
				envelope.WriteString(env.SectionBegin + "\x00" + env.SectionEnd + "\x00" + env.Separator + "\x00" +
					env.CallBegin("x", 0) + "\x00" + env.CallEnd + "\x00")
			}
			for _, starts := range []bool{false, true} {
				fr := toolcall.FrameOf(f, "", starts)
				envelope.WriteString(fr.CallsBefore + "\x00" + fr.CallsAfter + "\x00" + fr.ContentBefore + "\x00" + fr.ContentAfter + "\x00")
			}
		}
		n := p.tok.VocabSize()
		toks := make([][]byte, n)
		allowed := make([]bool, n)
		for i := range n {
			id := int32(i)
			toks[i] = p.tok.Piece(id)
			switch {
			case p.tok.IsEOG(id):
			case p.tok.IsControl(id):
				allowed[i] = len(toks[i]) > 0 && strings.Contains(envelope.String(), string(toks[i]))
			default:
				allowed[i] = true
			}
		}
		p.vocab = grammar.NewVocab(toks, allowed, p.tok.EOGs())
	})
	return p.vocab
}

// controlMarkup reports whether family f's reasoning or wrapper markup (toolcall.Markup)
// holds any of the model's control tokens. The parser must then see control tokens as
// text even when it parses no calls: Kimi K3's think and response channels are tags made
// of <|open|>, <|sep|> and <|close|>, and without them as text the reasoning would not
// split from the answer and the answer would lose its end.
func (p *Pipeline) controlMarkup(f toolcall.Family) bool {
	p.controlOnce.Do(func() {
		for id := range int32(p.tok.VocabSize()) {
			if p.tok.IsControl(id) && !p.tok.IsEOG(id) {
				if piece := p.tok.Piece(id); len(piece) > 0 {
					p.controlPieces = append(p.controlPieces, string(piece))
				}
			}
		}
	})
	for _, m := range toolcall.Markup(f) {
		for _, piece := range p.controlPieces {
			if strings.Contains(m, piece) {
				return true
			}
		}
	}
	return false
}
