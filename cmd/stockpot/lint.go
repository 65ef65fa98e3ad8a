package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/lint"
	"stockpot/internal/miss"
	"stockpot/internal/pipeline"
)

// cmdLint: stockpot lint [--target URL [--key KEY] | --model PATH] [--fail-under RATE] [--json] [LOG.jsonl]
func cmdLint(args []string) error {
	fs := newFlagSet("lint")
	modelSpec := fs.String("model", defaultModel, "model whose tokenizer and chat template render the requests: a GGUF path or synthetic:PRESET")
	target := fs.String("target", "", "a running stockpot serve (or any server with vLLM's /tokenize and /detokenize) whose tokenizer and template render the requests, instead of --model; without LOG.jsonl, lint its recent requests (GET /v1/requests/recent)")
	key := fs.String("key", "", "bearer token sent to --target: the serve's --admin-key, needed to read its recent requests")
	blockSize := fs.Int("block-size", 16, "tokens per KV block, as the server's --block-size")
	failUnder := fs.Float64("fail-under", 0, "exit with status 1 when the hit rate is under this rate (0..1, e.g. 0.8), for CI; 0 never fails")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	maxMisses := fs.Int("max-misses", 20, "divergences listed in the text report (JSON lists up to 100)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: stockpot lint [--target URL [--key KEY] | --model PATH] [--fail-under RATE] [--json] [LOG.jsonl]\n\n"+
			"Reads JSONL request logs (OpenAI chat, completions or Responses, or Anthropic Messages bodies, one per line,\n"+
			"or wrapped as {\"body\": {...}, \"path\": \"/v1/...\", \"session_id\": \"...\"}), tokenizes them as the server would,\n"+
			"replays them through the block-level prefix cache and reports the hit rate, where and why prompts leave\n"+
			"the cached prefix, and the hit rate with each cause fixed. With --target and no LOG.jsonl it lints the\n"+
			"server's recent requests (GET /v1/requests/recent, with --key the server's --admin-key).")
		fs.PrintDefaults()
	}
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 || (fs.NArg() == 0 && *target == "") {
		fs.Usage()
		return fmt.Errorf("lint: want exactly one LOG.jsonl, or none with --target (got %d arguments)", fs.NArg())
	}
	if *blockSize < 1 || *blockSize > 4096 {
		return fmt.Errorf("lint: --block-size %d out of range [1, 4096]", *blockSize)
	}
	if math.IsNaN(*failUnder) || *failUnder < 0 || *failUnder > 1 {
		return fmt.Errorf("lint: --fail-under %v: want a rate between 0 and 1", *failUnder)
	}
	base := strings.TrimSuffix(*target, "/")
	client := &http.Client{Timeout: 30 * time.Second}
	var (
		entries []lint.Entry
		bad     []lint.Malformed
		err     error
	)
	if fs.NArg() == 0 {
		if entries, bad, err = readRecent(client, base, *key); err != nil {
			return fmt.Errorf("lint: %w", err)
		}
	} else {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return fmt.Errorf("lint: %w", err)
		}
		defer f.Close()
		if entries, bad, err = readLog(f); err != nil {
			return fmt.Errorf("lint: %s: %w", fs.Arg(0), err)
		}
	}
	var (
		render lint.Renderer
		text   miss.Text
	)
	if *target != "" {
		rt := &remoteTokenizer{base: base, key: *key, client: client, pieces: map[int32][]byte{}}
		render, text = rt.render, rt
	} else {
		lf, err := openModel(*modelSpec, io.Discard)
		if err != nil {
			return fmt.Errorf("lint: %w", err)
		}
		tok := pipeline.FromTokenizer(lf.tok)
		render = func(l lint.Line) (lint.Prompt, error) { return renderLocal(tok, l) }
		text = tok
	}
	rep := lint.Analyze(entries, render, text, lint.Config{BlockSize: *blockSize})
	rep.Malformed = append(bad, rep.Malformed...)
	sort.SliceStable(rep.Malformed, func(a, b int) bool { return rep.Malformed[a].Line < rep.Malformed[b].Line })
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeLintText(os.Stdout, rep, *maxMisses)
	}
	return lint.Check(rep, *failUnder)
}

// readRecent reads a running serve's recent requests (GET /v1/requests/recent) as a log.
func readRecent(client *http.Client, base, key string) ([]lint.Entry, []lint.Malformed, error) {
	req, err := http.NewRequest(http.MethodGet, base+"/v1/requests/recent", nil)
	if err != nil {
		return nil, nil, fmt.Errorf("--target %s: %w", base, err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the recent requests of --target: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		if key == "" {
			return nil, nil, fmt.Errorf("%s/v1/requests/recent: 401: pass the server's --admin-key as --key KEY (or STOCKPOT_KEY)", base)
		}
		return nil, nil, fmt.Errorf("%s/v1/requests/recent: 401: the server refused --key; pass one of its --admin-key values", base)
	case http.StatusForbidden:
		return nil, nil, fmt.Errorf("%s/v1/requests/recent: 403: the server was started without --admin-key, so it keeps no recent requests; restart it with --admin-key KEY and pass --key KEY here, or lint a LOG.jsonl", base)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, nil, fmt.Errorf("%s/v1/requests/recent: status %d: %s", base, resp.StatusCode, bytes.TrimSpace(msg))
	}
	// The ring holds at most 8 MiB of bodies; the bound here only guards against a runaway answer.
	entries, bad, err := readLog(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the recent requests of --target: %w", err)
	}
	return entries, bad, nil
}

// readLog parses the log's lines; a malformed one is reported with its number and skipped.
func readLog(r io.Reader) ([]lint.Entry, []lint.Malformed, error) {
	var (
		entries []lint.Entry
		bad     []lint.Malformed
	)
	br := bufio.NewReaderSize(r, 1<<20)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if len(line) > 0 || err == nil {
			l, perr := lint.ParseLine(line)
			switch {
			case errors.Is(perr, lint.ErrBlank):
			case perr != nil:
				bad = append(bad, lint.Malformed{Line: n, Error: perr.Error()})
			default:
				entries = append(entries, lint.Entry{Number: n, Line: l})
			}
		}
		if err == io.EOF {
			return entries, bad, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

// readLine reads one line without its newline, at most lint.MaxLineBytes (the rest of a
// longer line is skipped and the line comes back over the limit, for ParseLine to refuse).
func readLine(br *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(out) <= lint.MaxLineBytes {
			out = append(out, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(out, []byte("\n")), err
	}
}

// renderLocal renders a logged request with the model's tokenizer, as serve would.
func renderLocal(tok pipeline.Tokenizer, l lint.Line) (lint.Prompt, error) {
	path := l.Path
	if path == "" || !strings.HasPrefix(path, "/v1/") {
		path = pipeline.DialectOf(l.Body)
	}
	p, err := pipeline.RenderRequest(tok, path, l.Body)
	if err != nil {
		return lint.Prompt{}, err
	}
	return lint.Prompt{Tokens: p.Tokens, Segments: p.Segments, Salt: p.Salt}, nil
}

func writeLintText(w io.Writer, r lint.Report, maxMisses int) {
	fmt.Fprintf(w, "stockpot lint: %d requests in %d sessions, %d prompt tokens, block size %d\n",
		r.Requests, r.Sessions, r.PromptTokens, r.BlockSize)
	fmt.Fprintf(w, "hit rate now: %.1f%% (%d of %d prompt tokens reusable)\n", 100*r.HitRate, r.CachedTokens, r.PromptTokens)
	if len(r.Causes) > 0 {
		fmt.Fprintf(w, "misses by cause:")
		for _, c := range miss.Causes {
			if n := r.Causes[c]; n > 0 {
				fmt.Fprintf(w, " %s=%d", c, n)
			}
		}
		fmt.Fprintln(w)
	}
	for _, f := range r.Fixes {
		fmt.Fprintf(w, "  fix %-10s (%s): hit rate %.1f%% (%+.1f points): %s\n", f.Name, f.Cause, 100*f.HitRate, 100*f.Gain, f.Help)
	}
	if len(r.Fixes) > 1 {
		fmt.Fprintf(w, "  all fixed: hit rate %.1f%% (%+.1f points)\n", 100*r.AllFixed, 100*(r.AllFixed-r.HitRate))
	}
	for i, m := range r.Misses {
		if i == maxMisses {
			fmt.Fprintf(w, "... %d more divergences (--json lists them)\n", len(r.Misses)-i)
			break
		}
		where := m.Segment
		if where == "" {
			where = "prompt"
		}
		fmt.Fprintf(w, "line %d (session %s): %s at token %d (block %d, %s): %s\n", m.Line, m.Session, m.Cause, m.Offset, m.Block, where, m.Detail)
		fmt.Fprintf(w, "    prompt: %q\n    cached: %q\n", m.Prompt, m.Cached)
	}
	for _, b := range r.Malformed {
		fmt.Fprintf(w, "line %d: skipped: %s\n", b.Line, b.Error)
	}
}

// remoteTokenizer renders requests with a running server's /tokenize (its chat template and
// tokenizer) and decodes with /detokenize, one token at a time (cached).
type remoteTokenizer struct {
	base   string
	key    string // --key, sent as a bearer token when set
	client *http.Client

	mu     sync.Mutex
	pieces map[int32][]byte // protected by mu
}

func (rt *remoteTokenizer) post(path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, rt.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if rt.key != "" {
		req.Header.Set("Authorization", "Bearer "+rt.key)
	}
	resp, err := rt.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, bytes.TrimSpace(data))
	}
	return json.Unmarshal(data, out)
}

func (rt *remoteTokenizer) render(l lint.Line) (lint.Prompt, error) {
	path := l.Path
	if path == "" || !strings.HasPrefix(path, "/v1/") {
		path = pipeline.DialectOf(l.Body)
	}
	var tokBody map[string]any
	salt := ""
	if path == pipeline.PathCompletions {
		req, err := api.ParseCompletionRequest(l.Body)
		if err != nil {
			return lint.Prompt{}, err
		}
		if req.PromptIsTokens {
			return lint.Prompt{Tokens: req.PromptTokens, Salt: req.CacheSalt}, nil
		}
		tokBody, salt = map[string]any{"prompt": req.PromptText}, req.CacheSalt
	} else {
		chat, err := chatOf(path, l.Body)
		if err != nil {
			return lint.Prompt{}, err
		}
		tokBody = map[string]any{"messages": chat.Messages, "add_generation_prompt": chat.AddGenerationPrompt == nil || *chat.AddGenerationPrompt}
		if len(chat.Tools) > 0 {
			tokBody["tools"] = chat.Tools
		}
		if chat.ChatTemplateKwargs != nil {
			tokBody["chat_template_kwargs"] = chat.ChatTemplateKwargs
		}
		salt = chat.CacheSalt
	}
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := rt.post("/tokenize", tokBody, &out); err != nil {
		return lint.Prompt{}, err
	}
	return lint.Prompt{Tokens: out.Tokens, Salt: salt}, nil
}

// chatOf parses a chat-shaped body of path into the chat request it means.
func chatOf(path string, body []byte) (*api.ChatRequest, error) {
	switch path {
	case pipeline.PathResponses:
		r, err := api.ParseResponsesRequest(body)
		if err != nil {
			return nil, err
		}
		return r.ChatRequest(nil)
	case pipeline.PathMessages:
		r, err := api.ParseMessagesRequest(body, false)
		if err != nil {
			return nil, err
		}
		return r.Chat, nil
	}
	return api.ParseChatRequest(body)
}

// Piece is the token's text from /detokenize; a token that renders as nothing is taken for
// a control token.
func (rt *remoteTokenizer) Piece(id int32) []byte {
	rt.mu.Lock()
	p, ok := rt.pieces[id]
	rt.mu.Unlock()
	if ok {
		return p
	}
	var out struct {
		Prompt string `json:"prompt"`
	}
	if err := rt.post("/detokenize", map[string]any{"tokens": []int32{id}}, &out); err != nil {
		out.Prompt = ""
	}
	p = []byte(out.Prompt)
	if len(p) == 0 {
		p = []byte(fmt.Sprintf("<control %d>", id))
	}
	rt.mu.Lock()
	rt.pieces[id] = p
	rt.mu.Unlock()
	return p
}

func (rt *remoteTokenizer) IsControl(id int32) bool {
	return bytes.HasPrefix(rt.Piece(id), []byte("<control "))
}

func (rt *remoteTokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if !rt.IsControl(id) {
			b.Write(rt.Piece(id))
		}
	}
	return b.String()
}
