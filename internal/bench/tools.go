package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// The agent workload's tools mode (--tools N): every request carries N function schemas in
// OpenAI's shape, and after each answer the client appends a synthetic assistant turn that
// calls one of them and the tool's result. The schemas, calls and results are a pure function
// of the seed, so the transcript (and with it the prompt the server renders) never depends on
// what a random-weight model happened to generate.

// MaxTools is how many tools the catalogue holds, the most --tools accepts.
var MaxTools = len(toolCatalogue)

// Tool is one entry of a request's "tools": {"type": "function", "function": {...}}.
type Tool struct {
	Type     string       `json:"type"` // always "function"
	Function ToolFunction `json:"function"`
}

// ToolFunction is a tool's name, what it does, and the JSON schema of its arguments.
type ToolFunction struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Parameters  *Schema `json:"parameters"`
}

// Schema is the part of JSON Schema the generated tools use. Properties is a map, so its JSON
// has sorted keys: the same tools marshal to the same bytes every turn.
type Schema struct {
	Type                 string             `json:"type"`
	Description          string             `json:"description,omitempty"`
	Enum                 []string           `json:"enum,omitempty"`
	Minimum              *int               `json:"minimum,omitempty"`
	Maximum              *int               `json:"maximum,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
}

// ToolCall is one entry of an assistant message's "tool_calls". Arguments is a JSON object
// encoded as a string, as OpenAI sends it.
type ToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"` // always "function"
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction names the tool called and carries its arguments.
type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// toolSpec is one catalogue entry; params are in the order a person would write them.
type toolSpec struct {
	name, desc string
	params     []paramSpec
}

// paramSpec is one parameter. str says what a string value looks like (see stringValue);
// for arrays it applies to the items.
type paramSpec struct {
	name     string
	required bool
	typ      string // string, integer, number, boolean, array
	desc     string
	enum     []string
	min, max int // integers; both 0: 0..100
	str      string
}

// toolCatalogue is what the seed picks tools from: the kind of tools coding and ops agents are
// given, with typed, described parameters, enums and required lists.
var toolCatalogue = []toolSpec{
	{"read_file", "Read a file from the workspace and return its contents with line numbers. Use start_line and end_line to read part of a large file.", []paramSpec{
		{name: "path", required: true, typ: "string", desc: "Path of the file, relative to the workspace root.", str: "path"},
		{name: "start_line", typ: "integer", desc: "First line to return, 1-based.", min: 1, max: 5000},
		{name: "end_line", typ: "integer", desc: "Last line to return, inclusive.", min: 1, max: 5000},
		{name: "encoding", typ: "string", desc: "How to decode the bytes.", enum: []string{"utf-8", "latin-1", "base64"}},
	}},
	{"write_file", "Create or replace a file in the workspace. Parent directories are created when create_dirs is true.", []paramSpec{
		{name: "path", required: true, typ: "string", desc: "Path of the file, relative to the workspace root.", str: "path"},
		{name: "content", required: true, typ: "string", desc: "The full new contents of the file.", str: "code"},
		{name: "create_dirs", typ: "boolean", desc: "Create missing parent directories."},
		{name: "mode", typ: "string", desc: "Replace the file or append to it.", enum: []string{"overwrite", "append"}},
	}},
	{"edit_file", "Replace an exact span of text in a file. The old text must occur in the file; occurrence picks which one when it occurs more than once.", []paramSpec{
		{name: "path", required: true, typ: "string", desc: "Path of the file to edit.", str: "path"},
		{name: "old_text", required: true, typ: "string", desc: "The exact text to replace, whitespace included.", str: "code"},
		{name: "new_text", required: true, typ: "string", desc: "The text to put in its place.", str: "code"},
		{name: "occurrence", typ: "integer", desc: "Which occurrence to replace, 1-based.", min: 1, max: 20},
	}},
	{"list_directory", "List the entries of a directory with their sizes and kinds.", []paramSpec{
		{name: "path", required: true, typ: "string", desc: "Directory to list, relative to the workspace root.", str: "dir"},
		{name: "recursive", typ: "boolean", desc: "Descend into subdirectories."},
		{name: "include_hidden", typ: "boolean", desc: "Include entries whose names start with a dot."},
		{name: "max_entries", typ: "integer", desc: "Stop after this many entries.", min: 1, max: 1000},
	}},
	{"search_code", "Search the workspace for a string or regular expression and return matching lines with their file and line number.", []paramSpec{
		{name: "query", required: true, typ: "string", desc: "Text or regular expression to look for.", str: "ident"},
		{name: "path_glob", typ: "string", desc: "Only search files matching this glob.", str: "glob"},
		{name: "regex", typ: "boolean", desc: "Treat query as a regular expression."},
		{name: "case_sensitive", typ: "boolean", desc: "Match case exactly."},
		{name: "max_results", typ: "integer", desc: "Stop after this many matches.", min: 1, max: 200},
	}},
	{"run_command", "Run a shell command in the workspace and return its exit status, standard output and standard error.", []paramSpec{
		{name: "command", required: true, typ: "string", desc: "The command line, run with /bin/sh -c.", str: "command"},
		{name: "cwd", typ: "string", desc: "Working directory, relative to the workspace root.", str: "dir"},
		{name: "timeout_seconds", typ: "integer", desc: "Kill the command after this many seconds.", min: 1, max: 3600},
		{name: "env", typ: "array", desc: "Extra environment variables as NAME=value.", str: "env"},
	}},
	{"run_tests", "Run the test suite of a package and report failures with their output.", []paramSpec{
		{name: "package", required: true, typ: "string", desc: "Package or directory whose tests to run.", str: "dir"},
		{name: "filter", typ: "string", desc: "Only run tests whose names match this pattern.", str: "ident"},
		{name: "verbose", typ: "boolean", desc: "Show the output of passing tests too."},
		{name: "timeout_seconds", typ: "integer", desc: "Fail the run after this many seconds.", min: 10, max: 1800},
	}},
	{"git_status", "Show the working tree status: staged, modified and untracked files.", []paramSpec{
		{name: "path", typ: "string", desc: "Limit the status to this path.", str: "dir"},
		{name: "include_untracked", typ: "boolean", desc: "List untracked files."},
	}},
	{"git_diff", "Show the changes between two revisions, or between a revision and the working tree.", []paramSpec{
		{name: "base", required: true, typ: "string", desc: "Base revision: a branch, tag or commit.", str: "ref"},
		{name: "head", typ: "string", desc: "Head revision; the working tree when omitted.", str: "ref"},
		{name: "paths", typ: "array", desc: "Limit the diff to these paths.", str: "path"},
		{name: "context_lines", typ: "integer", desc: "Lines of context around each change.", min: 0, max: 20},
	}},
	{"git_commit", "Commit the staged changes, or the given paths, with a message.", []paramSpec{
		{name: "message", required: true, typ: "string", desc: "The commit message: a summary line, a blank line, then the body.", str: "text"},
		{name: "paths", typ: "array", desc: "Stage these paths before committing.", str: "path"},
		{name: "amend", typ: "boolean", desc: "Amend the previous commit instead of making a new one."},
	}},
	{"http_request", "Send an HTTP request and return the status, headers and the first part of the body.", []paramSpec{
		{name: "url", required: true, typ: "string", desc: "Absolute URL to request.", str: "url"},
		{name: "method", required: true, typ: "string", desc: "HTTP method.", enum: []string{"GET", "POST", "PUT", "PATCH", "DELETE"}},
		{name: "headers", typ: "array", desc: "Request headers as Name: value.", str: "header"},
		{name: "body", typ: "string", desc: "Request body.", str: "text"},
		{name: "timeout_seconds", typ: "integer", desc: "Give up after this many seconds.", min: 1, max: 120},
	}},
	{"web_search", "Search the web and return the top results with titles, URLs and snippets.", []paramSpec{
		{name: "query", required: true, typ: "string", desc: "The search query.", str: "text"},
		{name: "num_results", typ: "integer", desc: "How many results to return.", min: 1, max: 20},
		{name: "recency", typ: "string", desc: "Only results newer than this.", enum: []string{"day", "week", "month", "year", "any"}},
		{name: "site", typ: "string", desc: "Only results from this domain.", str: "domain"},
	}},
	{"query_database", "Run a read-only SQL query against one of the analytics databases and return the rows as a table.", []paramSpec{
		{name: "sql", required: true, typ: "string", desc: "A single SELECT statement.", str: "sql"},
		{name: "database", required: true, typ: "string", desc: "Which database to query.", enum: []string{"analytics", "billing", "users", "inventory"}},
		{name: "max_rows", typ: "integer", desc: "Truncate the result after this many rows.", min: 1, max: 10000},
	}},
	{"create_issue", "Open an issue in the project's tracker and return its number and URL.", []paramSpec{
		{name: "title", required: true, typ: "string", desc: "One-line summary of the issue.", str: "text"},
		{name: "body", required: true, typ: "string", desc: "Description in Markdown: what happened, what was expected, how to reproduce.", str: "text"},
		{name: "priority", typ: "string", desc: "How urgent the issue is.", enum: []string{"low", "medium", "high", "urgent"}},
		{name: "labels", typ: "array", desc: "Labels to apply.", str: "ident"},
		{name: "assignee", typ: "string", desc: "User name of the assignee.", str: "ident"},
	}},
	{"get_issue", "Fetch an issue with its status, description and, optionally, its comments.", []paramSpec{
		{name: "issue_number", required: true, typ: "integer", desc: "The issue number.", min: 1, max: 99999},
		{name: "include_comments", typ: "boolean", desc: "Include the comment thread."},
	}},
	{"send_message", "Post a message to a chat channel, optionally as a reply in a thread.", []paramSpec{
		{name: "channel", required: true, typ: "string", desc: "Channel name without the leading #.", str: "ident"},
		{name: "text", required: true, typ: "string", desc: "Message text in Markdown.", str: "text"},
		{name: "thread_id", typ: "string", desc: "Reply in this thread.", str: "hex"},
		{name: "mention_users", typ: "array", desc: "User names to mention.", str: "ident"},
	}},
	{"get_weather", "Get the current weather and a forecast for a city.", []paramSpec{
		{name: "city", required: true, typ: "string", desc: "City name, optionally with a country code, e.g. Paris, FR.", str: "city"},
		{name: "units", typ: "string", desc: "Unit system for temperatures and speeds.", enum: []string{"metric", "imperial"}},
		{name: "days", typ: "integer", desc: "Days of forecast to include.", min: 1, max: 14},
	}},
	{"create_calendar_event", "Create a calendar event and invite attendees.", []paramSpec{
		{name: "title", required: true, typ: "string", desc: "Title of the event.", str: "text"},
		{name: "start", required: true, typ: "string", desc: "Start time in RFC 3339, e.g. 2025-06-01T09:30:00Z.", str: "time"},
		{name: "duration_minutes", required: true, typ: "integer", desc: "Length of the event.", min: 5, max: 480},
		{name: "attendees", typ: "array", desc: "E-mail addresses of the attendees.", str: "email"},
		{name: "location", typ: "string", desc: "Room or address.", str: "text"},
	}},
	{"fetch_metrics", "Read a time series from the metrics store, aggregated over a window.", []paramSpec{
		{name: "metric", required: true, typ: "string", desc: "Metric name.", str: "metric"},
		{name: "window", required: true, typ: "string", desc: "How far back to look.", enum: []string{"5m", "1h", "6h", "24h", "7d"}},
		{name: "aggregation", typ: "string", desc: "How to combine the samples in each step.", enum: []string{"avg", "p50", "p95", "p99", "max"}},
		{name: "step_seconds", typ: "integer", desc: "Resolution of the returned series.", min: 10, max: 3600},
	}},
	{"deploy_service", "Deploy a version of a service to an environment. With dry_run it only prints the plan.", []paramSpec{
		{name: "service", required: true, typ: "string", desc: "Service name.", str: "ident"},
		{name: "environment", required: true, typ: "string", desc: "Target environment.", enum: []string{"dev", "staging", "production"}},
		{name: "version", required: true, typ: "string", desc: "Image tag or commit to deploy.", str: "ref"},
		{name: "dry_run", typ: "boolean", desc: "Print the plan without changing anything."},
	}},
	{"read_logs", "Read recent log lines of a service, newest last.", []paramSpec{
		{name: "service", required: true, typ: "string", desc: "Service name.", str: "ident"},
		{name: "level", typ: "string", desc: "Lowest level to include.", enum: []string{"debug", "info", "warn", "error"}},
		{name: "since", typ: "string", desc: "Only lines after this time, RFC 3339.", str: "time"},
		{name: "limit", typ: "integer", desc: "At most this many lines.", min: 1, max: 5000},
		{name: "contains", typ: "string", desc: "Only lines containing this text.", str: "ident"},
	}},
	{"summarize_document", "Summarize a stored document in the requested style and length.", []paramSpec{
		{name: "document_id", required: true, typ: "string", desc: "Identifier of the document.", str: "hex"},
		{name: "max_words", typ: "integer", desc: "Upper bound on the summary's length.", min: 50, max: 2000},
		{name: "style", typ: "string", desc: "Shape of the summary.", enum: []string{"bullets", "paragraph", "tldr"}},
	}},
	{"translate_text", "Translate text between languages, keeping Markdown formatting.", []paramSpec{
		{name: "text", required: true, typ: "string", desc: "Text to translate.", str: "text"},
		{name: "target_language", required: true, typ: "string", desc: "Language to translate into.", enum: []string{"en", "de", "fr", "es", "ja", "zh", "pt"}},
		{name: "source_language", typ: "string", desc: "Language of the text; detected when omitted.", enum: []string{"en", "de", "fr", "es", "ja", "zh", "pt"}},
	}},
	{"calculate", "Evaluate an arithmetic expression exactly and return the result.", []paramSpec{
		{name: "expression", required: true, typ: "string", desc: "Expression with + - * / ^, parentheses and functions such as sqrt and log.", str: "expr"},
		{name: "precision", typ: "integer", desc: "Digits after the decimal point.", min: 0, max: 20},
	}},
}

// schema returns p's JSON schema.
func (p paramSpec) schema() *Schema {
	s := &Schema{Type: p.typ, Description: p.desc}
	switch p.typ {
	case "string":
		s.Enum = p.enum
	case "integer":
		lo, hi := p.bounds()
		s.Minimum, s.Maximum = ptr(lo), ptr(hi)
	case "array":
		s.Items = &Schema{Type: "string"}
	}
	return s
}

func (p paramSpec) bounds() (int, int) {
	if p.min == 0 && p.max == 0 {
		return 0, 100
	}
	return p.min, p.max
}

// toolSet is the chosen tools: the wire schemas, and the specs behind them for making calls.
type toolSet struct {
	tools []Tool
	specs []toolSpec // specs[i] made tools[i], with only the parameters tools[i] declares
}

// pickTools chooses n tools from the catalogue, in an order and with optional parameters that
// depend only on rng. REQUIRES: 0 < n ≤ MaxTools.
func pickTools(rng *rand.Rand, n int) toolSet {
	perm := rng.Perm(len(toolCatalogue))[:n]
	var ts toolSet
	no := false
	for _, i := range perm {
		spec := toolCatalogue[i]
		kept := toolSpec{name: spec.name, desc: spec.desc}
		params := &Schema{Type: "object", Properties: map[string]*Schema{}, AdditionalProperties: &no}
		for _, p := range spec.params {
			// Each optional parameter is declared with probability 3/4, so two seeds give
			// different schemas for the same tool; a tool keeps at least one parameter.
			if !p.required && rng.IntN(4) == 0 && (len(kept.params) > 0 || p.name != spec.params[len(spec.params)-1].name) {
				continue
			}
			kept.params = append(kept.params, p)
			params.Properties[p.name] = p.schema()
			if p.required {
				params.Required = append(params.Required, p.name)
			}
		}
		ts.tools = append(ts.tools, Tool{Type: "function", Function: ToolFunction{Name: spec.name, Description: spec.desc, Parameters: params}})
		ts.specs = append(ts.specs, kept)
	}
	return ts
}

// call makes a call of one of the tools with arguments valid against its schema: every
// required parameter, and each optional one with probability 1/2.
func (ts toolSet) call(g *textGen) ToolCall {
	spec := ts.specs[g.rng.IntN(len(ts.specs))]
	args := map[string]any{}
	for _, p := range spec.params {
		if !p.required && g.rng.IntN(2) == 0 {
			continue
		}
		args[p.name] = p.value(g)
	}
	b, err := json.Marshal(args) // sorted keys: deterministic
	if err != nil {
		panic(err) // only strings, ints, bools and string slices: cannot fail
	}
	return ToolCall{ID: "call_" + randomID(g.rng, 24), Type: "function", Function: ToolCallFunction{Name: spec.name, Arguments: string(b)}}
}

func (p paramSpec) value(g *textGen) any {
	switch p.typ {
	case "integer":
		lo, hi := p.bounds()
		// Small values are what agents mostly send; stay within the first 200 of the range.
		return lo + g.rng.IntN(min(hi-lo+1, 200))
	case "boolean":
		return g.rng.IntN(2) == 1
	case "array":
		out := make([]string, 1+g.rng.IntN(3))
		for i := range out {
			out[i] = stringValue(g, p.str)
		}
		return out
	default:
		if len(p.enum) > 0 {
			return p.enum[g.rng.IntN(len(p.enum))]
		}
		return stringValue(g, p.str)
	}
}

func (g *textGen) word() string { return wordList[g.rng.IntN(len(wordList))] }

// stringValue makes a plausible string of the given kind.
func stringValue(g *textGen, kind string) string {
	switch kind {
	case "path":
		return fmt.Sprintf("%s/%s/%s_%s.go", []string{"internal", "cmd", "pkg", "src"}[g.rng.IntN(4)], g.word(), g.word(), g.word())
	case "dir":
		return fmt.Sprintf("internal/%s", g.word())
	case "glob":
		return []string{"*.go", "**/*_test.go", "docs/*.md", "*.yaml", "internal/**"}[g.rng.IntN(5)]
	case "ident":
		return g.word() + "_" + g.word()
	case "command":
		return []string{"go test ./internal/", "make lint PKG=", "grep -rn TODO internal/", "go vet ./internal/"}[g.rng.IntN(4)] + g.word()
	case "ref":
		return randomHex(g.rng, 12)
	case "hex":
		return randomHex(g.rng, 16)
	case "url":
		return fmt.Sprintf("https://api.example.com/v1/%s/%s?limit=%d", g.word(), g.word(), 1+g.rng.IntN(100))
	case "domain":
		return g.word() + ".example.org"
	case "header":
		w := g.word()
		return "X-" + strings.ToUpper(w[:1]) + w[1:] + ": " + g.word()
	case "env":
		return strings.ToUpper(g.word()) + "=" + g.word()
	case "email":
		return g.word() + "." + g.word() + "@example.com"
	case "city":
		return []string{"Paris, FR", "Osaka, JP", "Lagos, NG", "Lima, PE", "Oslo, NO", "Pune, IN"}[g.rng.IntN(6)]
	case "time":
		return fmt.Sprintf("2025-%02d-%02dT%02d:%02d:00Z", 1+g.rng.IntN(12), 1+g.rng.IntN(28), g.rng.IntN(24), 15*g.rng.IntN(4))
	case "metric":
		return "http_" + g.word() + "_seconds"
	case "sql":
		return fmt.Sprintf("SELECT %s, count(*) FROM %s WHERE %s > %d GROUP BY 1 ORDER BY 2 DESC", g.word(), g.word(), g.word(), g.rng.IntN(1000))
	case "expr":
		return fmt.Sprintf("(%d + %d) * %d / %d", g.rng.IntN(1000), g.rng.IntN(1000), 1+g.rng.IntN(99), 1+g.rng.IntN(99))
	case "code":
		return fmt.Sprintf("func %s%s(%s int) error {\n\treturn %s(%s)\n}", g.word(), strings.ToUpper(g.word()[:1]), g.word(), g.word(), g.word())
	default: // "text"
		return g.words(8)
	}
}

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randomID(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = idAlphabet[rng.IntN(len(idAlphabet))]
	}
	return string(b)
}

func randomHex(rng *rand.Rand, n int) string {
	const hex = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = hex[rng.IntN(16)]
	}
	return string(b)
}

// toolResult is the content of the tool message answering call: a JSON object with the
// tool's output, about tokens long.
func toolResult(g *textGen, call ToolCall, tokens int) string {
	b, err := json.Marshal(struct {
		Status string `json:"status"`
		Tool   string `json:"tool"`
		Output string `json:"output"`
	}{"ok", call.Function.Name, g.words(tokens)})
	if err != nil {
		panic(err)
	}
	return string(b)
}
