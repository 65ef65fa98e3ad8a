package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Tool is one entry of a chat request's tools: a function the model may call. Raw is the
// entry exactly as the client sent it (key order kept), for the chat template.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON schema object; nil when absent
	Strict      bool
	Raw         json.RawMessage
}

// ToolCall is an assistant's call of a function, in requests (history) and responses.
type ToolCall struct {
	Index    *int             `json:"index,omitempty"` // only in streamed deltas
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is the function part of a tool call. Arguments is JSON text.
type ToolCallFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Tool choice modes.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
	ToolChoiceFunction = "function" // a named function: ToolChoice.Name
)

// ToolChoice is tool_choice decoded.
type ToolChoice struct {
	Mode string // one of the ToolChoice* constants
	Name string // for ToolChoiceFunction
	// Allowed restricts the callable tools to these names (OpenAI's allowed_tools form, with
	// Mode auto or required); nil means every tool. The prompt still lists every tool, so it
	// stays the same across turns.
	Allowed []string
}

// Callable reports whether the choice lets the model call the tool named name.
func (c ToolChoice) Callable(name string) bool {
	switch c.Mode {
	case ToolChoiceNone:
		return false
	case ToolChoiceFunction:
		return name == c.Name
	}
	if c.Allowed == nil {
		return true
	}
	for _, a := range c.Allowed {
		if a == name {
			return true
		}
	}
	return false
}

// Response format types.
const (
	FormatText       = "text"
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
)

// ResponseFormat is response_format decoded.
type ResponseFormat struct {
	Type   string          // FormatText, FormatJSONObject or FormatJSONSchema
	Name   string          // json_schema.name
	Schema json.RawMessage // json_schema.schema; nil for json_object
	Strict bool
}

// toolNameRE is OpenAI's rule for function names.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// parseTools decodes and checks tools. Each error names the offending field.
func parseTools(raw json.RawMessage) ([]Tool, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if bytes.TrimSpace(raw)[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, Invalid("tools", "tools must be an array of {\"type\": \"function\", \"function\": {...}} objects")
	}
	tools := make([]Tool, 0, len(items))
	seen := map[string]bool{}
	for i, it := range items {
		p := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type     *string          `json:"type"`
			Function *json.RawMessage `json:"function"`
		}
		if !isObject(it) || json.Unmarshal(it, &t) != nil {
			return nil, Invalid(p, "%s must be an object {\"type\": \"function\", \"function\": {...}}", p)
		}
		if t.Type == nil || *t.Type != "function" {
			got := "missing"
			if t.Type != nil {
				got = Quote(*t.Type)
			}
			return nil, Invalid(p+".type", "%s.type must be \"function\" (got %s); only function tools are supported", p, got)
		}
		if t.Function == nil || !isObject(*t.Function) {
			return nil, Invalid(p+".function", "%s.function must be an object with a name", p)
		}
		var f struct {
			Name        *string         `json:"name"`
			Description *string         `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(*t.Function, &f); err != nil {
			return nil, Invalid(p+".function", "%s.function: %v", p, err)
		}
		if f.Name == nil || *f.Name == "" {
			return nil, Invalid(p+".function.name", "%s.function.name is required", p)
		}
		if !toolNameRE.MatchString(*f.Name) {
			return nil, Invalid(p+".function.name", "%s.function.name %s must be 1 to 64 characters of a-z, A-Z, 0-9, '_', '.' or '-'", p, Quote(*f.Name))
		}
		if seen[*f.Name] {
			return nil, Invalid(p+".function.name", "%s.function.name %s is given twice", p, Quote(*f.Name))
		}
		seen[*f.Name] = true
		tool := Tool{Name: *f.Name, Raw: append(json.RawMessage(nil), bytes.TrimSpace(it)...)}
		if f.Description != nil {
			tool.Description = *f.Description
		}
		if f.Strict != nil {
			tool.Strict = *f.Strict
		}
		if !isNull(f.Parameters) {
			if err := checkSchema(f.Parameters, p+".function.parameters"); err != nil {
				return nil, err
			}
			tool.Parameters = append(json.RawMessage(nil), bytes.TrimSpace(f.Parameters)...)
		}
		tools = append(tools, tool)
	}
	return tools, nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// jsonSchemaTypes are the JSON schema type names.
var jsonSchemaTypes = map[string]bool{"object": true, "array": true, "string": true, "number": true,
	"integer": true, "boolean": true, "null": true}

// checkSchema checks that raw is a JSON schema object whose structural keywords have the right
// shapes (type, properties, required, items, enum, anyOf/oneOf/allOf, $defs). It does not
// decide which keywords constrained decoding supports; that is the grammar compiler's word.
func checkSchema(raw json.RawMessage, param string) error {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return Invalid(param, "%s is not valid JSON: %v", param, err)
	}
	return checkSchemaValue(v, param, 0)
}

// maxSchemaDepth bounds the nesting checkSchemaValue walks (and so its stack).
const maxSchemaDepth = 64

func checkSchemaValue(v any, param string, depth int) error {
	if depth > maxSchemaDepth {
		return Invalid(param, "%s nests deeper than %d levels", param, maxSchemaDepth)
	}
	if _, ok := v.(bool); ok && depth > 0 {
		return nil // true / false schemas are valid below the root
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Invalid(param, "%s must be a JSON schema object", param)
	}
	if t, ok := m["type"]; ok {
		switch t := t.(type) {
		case string:
			if !jsonSchemaTypes[t] {
				return Invalid(param+".type", "%s.type %s is not a JSON schema type", param, Quote(t))
			}
		case []any:
			for _, e := range t {
				s, ok := e.(string)
				if !ok || !jsonSchemaTypes[s] {
					return Invalid(param+".type", "%s.type must be a type name or an array of type names", param)
				}
			}
		default:
			return Invalid(param+".type", "%s.type must be a type name or an array of type names", param)
		}
	}
	if p, ok := m["properties"]; ok {
		props, ok := p.(map[string]any)
		if !ok {
			return Invalid(param+".properties", "%s.properties must be an object", param)
		}
		for k, sub := range props {
			if err := checkSchemaValue(sub, param+".properties."+k, depth+1); err != nil {
				return err
			}
		}
	}
	if r, ok := m["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return Invalid(param+".required", "%s.required must be an array of property names", param)
		}
		for _, e := range list {
			if _, ok := e.(string); !ok {
				return Invalid(param+".required", "%s.required must be an array of property names", param)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties", "not"} {
		if sub, ok := m[k]; ok {
			if _, isBool := sub.(bool); isBool {
				continue
			}
			if err := checkSchemaValue(sub, param+"."+k, depth+1); err != nil {
				return err
			}
		}
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if l, ok := m[k]; ok {
			list, ok := l.([]any)
			if !ok || len(list) == 0 {
				return Invalid(param+"."+k, "%s.%s must be a non-empty array of schemas", param, k)
			}
			for i, sub := range list {
				if err := checkSchemaValue(sub, fmt.Sprintf("%s.%s[%d]", param, k, i), depth+1); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := m[k]; ok {
			defs, ok := d.(map[string]any)
			if !ok {
				return Invalid(param+"."+k, "%s.%s must be an object of schemas", param, k)
			}
			for name, sub := range defs {
				if err := checkSchemaValue(sub, param+"."+k+"."+name, depth+1); err != nil {
					return err
				}
			}
		}
	}
	if e, ok := m["enum"]; ok {
		if l, ok := e.([]any); !ok || len(l) == 0 {
			return Invalid(param+".enum", "%s.enum must be a non-empty array", param)
		}
	}
	return nil
}

// parseToolChoice decodes tool_choice against the request's tools.
func parseToolChoice(raw json.RawMessage, tools []Tool) (ToolChoice, error) {
	if isNull(raw) {
		if len(tools) == 0 {
			return ToolChoice{Mode: ToolChoiceNone}, nil
		}
		return ToolChoice{Mode: ToolChoiceAuto}, nil
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return ToolChoice{}, Invalid("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
		}
		switch s {
		case ToolChoiceNone:
			return ToolChoice{Mode: s}, nil
		case ToolChoiceAuto, ToolChoiceRequired:
			if len(tools) == 0 {
				return ToolChoice{}, Invalid("tool_choice", "tool_choice %s needs tools", Quote(s))
			}
			return ToolChoice{Mode: s}, nil
		}
		return ToolChoice{}, Invalid("tool_choice", "tool_choice %s is not one of \"none\", \"auto\", \"required\"", Quote(s))
	}
	var o struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
		AllowedTools *struct {
			Mode  string `json:"mode"`
			Tools []struct {
				Type     string `json:"type"`
				Function *struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		} `json:"allowed_tools"`
	}
	if raw[0] == '{' && json.Unmarshal(raw, &o) == nil && o.Type == "allowed_tools" {
		return parseAllowedTools(o.AllowedTools, tools)
	}
	if raw[0] != '{' || json.Unmarshal(raw, &o) != nil || o.Type != "function" || o.Function == nil || o.Function.Name == "" {
		return ToolChoice{}, Invalid("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	for _, t := range tools {
		if t.Name == o.Function.Name {
			return ToolChoice{Mode: ToolChoiceFunction, Name: t.Name}, nil
		}
	}
	return ToolChoice{}, Invalid("tool_choice", "tool_choice names function %s, which is not among the request's tools", Quote(o.Function.Name))
}

// parseAllowedTools decodes tool_choice {"type": "allowed_tools", "allowed_tools": {"mode":
// "auto"|"required", "tools": [{"type": "function", "function": {"name": ...}}]}}.
func parseAllowedTools(a *struct {
	Mode  string `json:"mode"`
	Tools []struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}, tools []Tool) (ToolChoice, error) {
	const p = "tool_choice.allowed_tools"
	if a == nil {
		return ToolChoice{}, Invalid(p, "%s is required when tool_choice.type is \"allowed_tools\"", p)
	}
	if a.Mode != ToolChoiceAuto && a.Mode != ToolChoiceRequired {
		return ToolChoice{}, Invalid(p+".mode", "%s.mode must be \"auto\" or \"required\", got %s", p, Quote(a.Mode))
	}
	if len(a.Tools) == 0 {
		return ToolChoice{}, Invalid(p+".tools", "%s.tools must name at least one tool", p)
	}
	c := ToolChoice{Mode: a.Mode, Allowed: []string{}}
	for i, t := range a.Tools {
		q := fmt.Sprintf("%s.tools[%d]", p, i)
		if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
			return ToolChoice{}, Invalid(q, "%s must be {\"type\": \"function\", \"function\": {\"name\": ...}}", q)
		}
		found := false
		for _, tool := range tools {
			found = found || tool.Name == t.Function.Name
		}
		if !found {
			return ToolChoice{}, Invalid(q, "%s names function %s, which is not among the request's tools", q, Quote(t.Function.Name))
		}
		c.Allowed = append(c.Allowed, t.Function.Name)
	}
	return c, nil
}

// parseResponseFormat decodes response_format.
func parseResponseFormat(raw json.RawMessage) (*ResponseFormat, error) {
	if isNull(raw) {
		return nil, nil
	}
	var o struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if !isObject(raw) || json.Unmarshal(raw, &o) != nil {
		return nil, Invalid("response_format", "response_format must be an object {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}")
	}
	switch o.Type {
	case "", FormatText:
		return nil, nil
	case FormatJSONObject:
		return &ResponseFormat{Type: FormatJSONObject}, nil
	case FormatJSONSchema:
		if o.JSONSchema == nil {
			return nil, Invalid("response_format.json_schema", "response_format.json_schema is required when type is \"json_schema\"")
		}
		if o.JSONSchema.Name != "" && !toolNameRE.MatchString(o.JSONSchema.Name) {
			return nil, Invalid("response_format.json_schema.name", "response_format.json_schema.name %s must be 1 to 64 characters of a-z, A-Z, 0-9, '_', '.' or '-'", Quote(o.JSONSchema.Name))
		}
		f := &ResponseFormat{Type: FormatJSONSchema, Name: o.JSONSchema.Name}
		if o.JSONSchema.Strict != nil {
			f.Strict = *o.JSONSchema.Strict
		}
		if isNull(o.JSONSchema.Schema) {
			f.Schema = json.RawMessage(`{}`)
			return f, nil
		}
		if err := checkSchema(o.JSONSchema.Schema, "response_format.json_schema.schema"); err != nil {
			return nil, err
		}
		f.Schema = append(json.RawMessage(nil), bytes.TrimSpace(o.JSONSchema.Schema)...)
		return f, nil
	}
	return nil, Invalid("response_format.type", "response_format.type %s is not one of \"text\", \"json_object\", \"json_schema\"", Quote(o.Type))
}

// parseToolCalls decodes an assistant message's tool_calls.
func parseToolCalls(raw json.RawMessage, param string) ([]ToolCall, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if bytes.TrimSpace(raw)[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, Invalid(param, "%s must be an array of tool calls", param)
	}
	calls := make([]ToolCall, 0, len(items))
	for i, it := range items {
		p := fmt.Sprintf("%s[%d]", param, i)
		var c struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function *struct {
				Name      *string         `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if !isObject(it) || json.Unmarshal(it, &c) != nil {
			return nil, Invalid(p, "%s must be an object {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", p)
		}
		if c.Type != "" && c.Type != "function" {
			return nil, Invalid(p+".type", "%s.type must be \"function\", got %s", p, Quote(c.Type))
		}
		if err := CheckID(p+".id", c.ID); err != nil {
			return nil, err
		}
		if c.Function == nil || c.Function.Name == nil || *c.Function.Name == "" {
			return nil, Invalid(p+".function.name", "%s.function.name is required", p)
		}
		args, err := toolArguments(c.Function.Arguments, p+".function.arguments")
		if err != nil {
			return nil, err
		}
		calls = append(calls, ToolCall{ID: c.ID, Type: "function", Function: ToolCallFunction{Name: *c.Function.Name, Arguments: args}})
	}
	return calls, nil
}

// toolArguments returns a call's arguments as JSON text. On the wire they are a JSON string
// holding JSON; an object given directly (some clients send one) is accepted too.
func toolArguments(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "{}", nil
	}
	var s string
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", Invalid(param, "%s must be a string of JSON", param)
		}
		if strings.TrimSpace(s) == "" {
			return "{}", nil
		}
	case '{':
		s = string(raw)
	default:
		return "", Invalid(param, "%s must be a string of JSON", param)
	}
	if !json.Valid([]byte(s)) {
		return "", Invalid(param, "%s is not valid JSON: %.80q", param, s)
	}
	return s, nil
}
