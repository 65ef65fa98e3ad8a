package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"
)

// ChatMessage is one message of a chat request as the template sees it, in
// the shape transformers' apply_chat_template passes to the model's Jinja
// template (and vLLM builds from an OpenAI request).
type ChatMessage struct {
	Role string
	// Content is nil (None: an assistant turn that only calls tools), a
	// string, or []ContentPart. Parts reach the template as a list of
	// {"type": ..., "text": ...} dicts when the template iterates over
	// content (ContentParts); otherwise their texts are joined with "\n"
	// (ContentString), as vLLM does.
	Content any
	// ToolCalls of an assistant turn. Their arguments (a JSON text on the
	// wire) reach the template as a dict.
	ToolCalls []ToolCall
	// ToolCallID and Name of a tool result ("tool" role); Name also on
	// other roles where the client sent it. Omitted when "".
	ToolCallID string
	Name       string
	// ReasoningContent of an earlier assistant turn (message.reasoning_content
	// in templates that replay or strip thinking). Omitted when "".
	ReasoningContent string
	// Extra holds any other fields of the message, passed through as JSON
	// (keys sorted, after the fields above).
	Extra map[string]json.RawMessage
}

// ContentPart is one element of a content array. Only text parts are
// rendered; other types reach a parts-iterating template as {"type": Type}.
type ContentPart struct {
	Type string // "text"
	Text string
}

// ToolCall is an assistant's call of a function tool.
type ToolCall struct {
	ID        string // omitted when ""
	Type      string // "function" when ""
	Name      string
	Arguments string // the arguments as a JSON text, as on the wire
}

// ContentFormat is how content arrays reach the template.
type ContentFormat int

const (
	// ContentAuto detects the format from the template source, as vLLM's
	// _detect_content_format does: a template with a {% for x in
	// message.content %} loop (directly or through a variable set from it)
	// gets lists, every other template strings.
	ContentAuto ContentFormat = iota
	// ContentString joins the text parts with "\n" (vLLM's "string").
	ContentString
	// ContentParts passes the list of parts (vLLM's "openai", and what
	// transformers does with whatever the caller passes).
	ContentParts
)

func (f ContentFormat) String() string {
	switch f {
	case ContentString:
		return "string"
	case ContentParts:
		return "openai"
	}
	return "auto"
}

// RenderOptions are the rest of apply_chat_template's arguments.
type RenderOptions struct {
	// Tools are the request's tools, each as received
	// ({"type":"function","function":{"name","description","parameters"}});
	// they reach the template as `tools`, in their key order. None when empty.
	Tools []json.RawMessage
	// AddGenerationPrompt opens an assistant turn at the end.
	AddGenerationPrompt bool
	// Kwargs are extra template variables (the request's
	// chat_template_kwargs: enable_thinking, builtin_tools, date_string,
	// documents, ...). Values are Go values (bool, string, numbers, []any,
	// map[string]any) or json.RawMessage. They cannot replace messages,
	// tools or add_generation_prompt.
	Kwargs map[string]any
	// Now is what strftime_now formats (UTC); zero means the clock.
	Now time.Time
	// ContentFormat is how content arrays are passed; ContentAuto detects.
	ContentFormat ContentFormat
	// Template names a template of the GGUF (tokenizer.chat_template.<name>);
	// "" picks "tool_use" when there are tools and the model has one, else
	// the default tokenizer.chat_template.
	Template string
}

// TemplateError is a template's own refusal: what it passed to
// raise_exception (a conversation it does not support, such as roles out of
// order). The HTTP layer answers 400 with Message.
type TemplateError struct {
	Message string
}

func (e *TemplateError) Error() string { return "chat template: " + e.Message }

// Is makes errors.Is(err, ErrChatTemplate) true for template refusals too.
func (e *TemplateError) Is(target error) bool { return target == ErrChatTemplate }

// ErrNoTemplate is wrapped when the named template does not exist.
var ErrNoTemplate = errors.New("tokenizer: no such chat template")

// TemplateToolUse is the GGUF name of the template for requests with tools.
const TemplateToolUse = "tool_use"

// preparedTemplate is one template source, compiled once.
type preparedTemplate struct {
	src    string
	tmpl   *jinja.Template
	format ContentFormat // detected: ContentString or ContentParts
	// stringArgs: the template concatenates tool-call arguments, so they
	// are passed as the JSON strings they were received as.
	stringArgs bool
	err        error
}

// compiledTemplate is the Tokenizer's cache of compiled templates by name.
type compiledTemplate struct {
	mu     sync.Mutex
	byName map[string]*preparedTemplate // protected by mu
}

func (c *compiledTemplate) get(name, src string) *preparedTemplate {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byName[name]; ok {
		return p
	}
	if c.byName == nil {
		c.byName = make(map[string]*preparedTemplate)
	}
	p := prepareTemplate(src)
	c.byName[name] = p
	return p
}

func prepareTemplate(src string) *preparedTemplate {
	p := &preparedTemplate{src: src}
	p.tmpl, p.err = compileTemplate(src)
	p.format = DetectContentFormat(src)
	p.stringArgs = DetectStringArguments(src)
	return p
}

// templateFor picks the template source for a request.
func (t *Tokenizer) templateFor(opts RenderOptions) (*preparedTemplate, error) {
	name := opts.Template
	if name == "" && len(opts.Tools) > 0 {
		if _, ok := t.chatTemplates[TemplateToolUse]; ok {
			name = TemplateToolUse
		}
	}
	if name == "" || name == "default" {
		return t.template.get("", t.chatTemplate), nil
	}
	src, ok := t.chatTemplates[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (the model has %s)", ErrNoTemplate, name, strings.Join(t.ChatTemplateNames(), ", "))
	}
	return t.template.get(name, src), nil
}

// ChatTemplateNames lists the model's named templates (tokenizer.chat_template.<name>),
// sorted, after "default" when the model has tokenizer.chat_template.
func (t *Tokenizer) ChatTemplateNames() []string {
	var names []string
	for n := range t.chatTemplates {
		names = append(names, n)
	}
	sort.Strings(names)
	if t.chatTemplate != "" {
		names = append([]string{"default"}, names...)
	}
	return names
}

// ChatContentFormat reports how content arrays reach the template opts
// selects (ContentString or ContentParts).
func (t *Tokenizer) ChatContentFormat(opts RenderOptions) (ContentFormat, error) {
	p, err := t.templateFor(opts)
	if err != nil {
		return ContentAuto, err
	}
	if opts.ContentFormat != ContentAuto {
		return opts.ContentFormat, nil
	}
	return p.format, nil
}

// RenderChat renders msgs with the model's chat template as
// transformers' apply_chat_template(messages, tools=..., add_generation_prompt=...,
// **kwargs) does: the template gets messages, tools (None without tools),
// documents (None unless a kwarg), add_generation_prompt, bos_token,
// eos_token, the kwargs, and the globals
// raise_exception and strftime_now. Tool-call arguments are dicts; if the
// template fails with dicts it is rendered again with the arguments as the
// JSON strings they were received as (templates written for strings), and
// that rendering is returned when it succeeds.
//
// A template's raise_exception is a *TemplateError; other failures wrap
// ErrChatTemplate (and the argument errors ErrJSONValue).
func (t *Tokenizer) RenderChat(msgs []ChatMessage, opts RenderOptions) (string, error) {
	p, err := t.templateFor(opts)
	if err != nil {
		return "", err
	}
	return render(p, msgs, opts, t.Token(t.bos), t.Token(t.eos))
}

// RenderChatWith renders msgs with an arbitrary template source and the given
// BOS and EOS texts, the way RenderChat does (opts.Template is ignored).
func RenderChatWith(src string, msgs []ChatMessage, opts RenderOptions, bosToken, eosToken string) (string, error) {
	return render(prepareTemplate(src), msgs, opts, bosToken, eosToken)
}

func render(p *preparedTemplate, msgs []ChatMessage, opts RenderOptions, bos, eos string) (string, error) {
	out, _, err := renderCtx(p, msgs, opts, bos, eos)
	return out, err
}

// renderCtx is render that also returns the variables of the rendering it
// returns (the tests hand them to the reference engines).
func renderCtx(p *preparedTemplate, msgs []ChatMessage, opts RenderOptions, bos, eos string) (string, map[string]jinja.Value, error) {
	if p.err != nil {
		return "", nil, p.err
	}
	if len(msgs) == 0 {
		return "", nil, fmt.Errorf("%w: no messages", ErrChatTemplate)
	}
	format := opts.ContentFormat
	if format == ContentAuto {
		format = p.format
	}
	ctx, err := renderContext(msgs, opts, format, bos, eos, !p.stringArgs)
	if err != nil {
		return "", nil, err
	}
	out, err := execute(p, ctx)
	if err == nil || !hasToolCalls(msgs) {
		return out, ctx, err
	}
	// The template may expect the arguments the other way.
	ctx2, err2 := renderContext(msgs, opts, format, bos, eos, p.stringArgs)
	if err2 != nil {
		return "", ctx, err
	}
	if out2, err2 := execute(p, ctx2); err2 == nil {
		return out2, ctx2, nil
	}
	return "", ctx, err
}

func hasToolCalls(msgs []ChatMessage) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// renderContext builds the template's variables.
func renderContext(msgs []ChatMessage, opts RenderOptions, format ContentFormat, bos, eos string, argsAsDicts bool) (map[string]jinja.Value, error) {
	ctx := make(map[string]jinja.Value, 8+len(opts.Kwargs))
	for k, v := range opts.Kwargs {
		switch k {
		case "messages", "tools", "add_generation_prompt":
			continue
		}
		jv, err := goValue(v)
		if err != nil {
			return nil, fmt.Errorf("%w: kwarg %q: %v", ErrChatTemplate, k, err)
		}
		ctx[k] = jv
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		mv, err := messageValue(m, format, argsAsDicts)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		list[i] = mv
	}
	ctx["messages"] = jinja.NewList(list)
	ctx["tools"] = jinja.None()
	if len(opts.Tools) > 0 {
		tools := make([]jinja.Value, len(opts.Tools))
		for i, raw := range opts.Tools {
			tv, err := jsonValue(raw)
			if err != nil {
				return nil, fmt.Errorf("tool %d: %w", i, err)
			}
			tools[i] = tv
		}
		ctx["tools"] = jinja.NewList(tools)
	}
	if _, ok := ctx["documents"]; !ok {
		ctx["documents"] = jinja.None() // transformers passes documents=None
	}
	ctx["add_generation_prompt"] = jinja.NewBool(opts.AddGenerationPrompt)
	if _, ok := ctx["bos_token"]; !ok {
		ctx["bos_token"] = jinja.NewString(bos)
	}
	if _, ok := ctx["eos_token"]; !ok {
		ctx["eos_token"] = jinja.NewString(eos)
	}
	now := opts.Now
	ctx["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	ctx["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now: want a format string")
		}
		at := now
		if at.IsZero() {
			at = time.Now()
		}
		return jinja.NewString(Strftime(at.UTC(), args[0].AsString())), nil
	})
	ctx[tojsonName] = jinja.NewCallable("tojson", tojsonFilter)
	return ctx, nil
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called"
	if len(args) > 0 {
		if args[0].IsString() {
			msg = args[0].AsString()
		} else {
			msg = args[0].String()
		}
	}
	return jinja.Undefined(), &TemplateError{Message: msg}
}

// messageValue is a message as vLLM's chat parsing hands it to the
// template (_parse_chat_message_content, _postprocess_messages):
//
//   - content: a string, or with ContentParts a list of parts; None (and
//     absent) content is "" (transformers would pass None, which
//     breaks templates such as Qwen3's on tool-call turns: `'</think>' in
//     None`); a tool result's text parts are always joined into a string;
//   - tool_calls (non-empty only) with arguments parsed into dicts ({} for
//     "" or text that is not JSON), unless argsAsDicts is false;
//   - reasoning and reasoning_content (both, vLLM's compatibility pair);
//   - tool_call_id, name; then Extra, keys sorted.
func messageValue(m ChatMessage, format ContentFormat, argsAsDicts bool) (jinja.Value, error) {
	d := jinja.NewDict()
	md := d.AsDict()
	md.Set("role", jinja.NewString(m.Role))
	cformat := format
	if m.Role == "tool" && onlyText(m.Content) {
		cformat = ContentString
	}
	cv, err := contentValue(m.Content, cformat)
	if err != nil {
		return jinja.Undefined(), err
	}
	md.Set("content", cv)
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			cd := jinja.NewDict()
			if c.ID != "" {
				cd.AsDict().Set("id", jinja.NewString(c.ID))
			}
			typ := c.Type
			if typ == "" {
				typ = "function"
			}
			cd.AsDict().Set("type", jinja.NewString(typ))
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(c.Name))
			args := jinja.NewString(c.Arguments)
			if argsAsDicts {
				args = jinja.NewDict()
				if av, err := jsonValue([]byte(c.Arguments)); err == nil && (av.IsDict() || av.IsList()) {
					args = av
				}
			}
			fn.AsDict().Set("arguments", args)
			cd.AsDict().Set("function", fn)
			calls[i] = cd
		}
		md.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ReasoningContent != "" {
		md.Set("reasoning", jinja.NewString(m.ReasoningContent))
		md.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	if m.ToolCallID != "" {
		md.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		md.Set("name", jinja.NewString(m.Name))
	}
	keys := make([]string, 0, len(m.Extra))
	for k := range m.Extra {
		if !md.Has(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := jsonValue(m.Extra[k])
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("field %q: %w", k, err)
		}
		md.Set(k, v)
	}
	return d, nil
}

func onlyText(c any) bool {
	parts, ok := c.([]ContentPart)
	if !ok {
		return true
	}
	for _, p := range parts {
		if p.Type != "text" {
			return false
		}
	}
	return true
}

// contentValue is content in the given format: ContentString joins the
// text parts with "\n" (other parts are dropped: Stockpot renders no
// media); ContentParts passes parts as {"type": "text", "text": ...} and
// others as {"type": ...}. nil is "".
func contentValue(c any, format ContentFormat) (jinja.Value, error) {
	var parts []ContentPart
	switch v := c.(type) {
	case nil:
		// vLLM gives parts-iterating templates [] here; "" works with
		// those too (they test `is string` first) and also with the ones
		// that read content[0] of a non-string (Devstral).
		return jinja.NewString(""), nil
	case string:
		if format != ContentParts {
			return jinja.NewString(v), nil
		}
		// A string stays a string for parts-iterating templates too: they
		// test `content is string` first (vLLM wraps it, with the same
		// rendering for the templates it detects as "openai").
		return jinja.NewString(v), nil
	case []ContentPart:
		parts = v
	default:
		return jinja.Undefined(), fmt.Errorf("%w: content of type %T", ErrChatTemplate, c)
	}
	if format == ContentParts {
		items := make([]jinja.Value, 0, len(parts))
		for _, p := range parts {
			pd := jinja.NewDict()
			pd.AsDict().Set("type", jinja.NewString(p.Type))
			if p.Type == "text" {
				pd.AsDict().Set("text", jinja.NewString(p.Text))
			}
			items = append(items, pd)
		}
		return jinja.NewList(items), nil
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return jinja.NewString(strings.Join(texts, "\n")), nil
}

// execute renders, turning an engine panic into an error.
func execute(p *preparedTemplate, ctx map[string]jinja.Value) (out string, err error) {
	defer func() {
		// A template is outside input; an engine bug on it must not take
		// the server down.
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w %s: render panicked: %v", ErrChatTemplate, templateName(p.src), r)
		}
	}()
	out, err = p.tmpl.RenderValues(ctx)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("%w %s: %v", ErrChatTemplate, templateName(p.src), err)
	}
	return out, nil
}
