package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Client sends ops the way a careful API client does: it retries what failed cleanly or
// transiently (a refused connection, a 5xx, a 429 after its Retry-After, a stream cut before
// its end) with backoff, within a budget, and never retries an answer it got.
type Client struct {
	HTTP   *http.Client
	Key    string        // bearer key, if the fleet wants one
	Budget time.Duration // total time one op may spend retrying
}

// answer is what a complete response says.
type answer struct {
	text   string
	finish string
	prompt int
	cached int // -1: not reported
	// transfer and remote are usage.cache's transfer_tokens (pulled from a prefill replica)
	// and remote_tokens (restored from the remote tier).
	transfer, remote int
}

// errPermanent marks a failure no retry can fix (a 4xx other than 408/429).
type errPermanent struct{ error }

// Do runs op against base (a base URL) and returns how it ended.
func (c *Client) Do(ctx context.Context, op *Op, base string) Outcome {
	out := Outcome{Op: op, Cached: -1}
	if op.Kind == Cancel || op.Kind == Disconnect {
		return c.abort(ctx, op, base)
	}
	a, tries, ok := c.answer(ctx, time.Now().Add(c.Budget), &out, func() (answer, time.Duration, error) {
		return c.try(ctx, op, base, op.Body, op.Stream)
	})
	out.Attempts = tries
	if ok {
		out.Status, out.Answer, out.Finish, out.Prompt, out.Cached = Answered, a.text, a.finish, a.prompt, a.cached
		out.Transfer, out.Remote = a.transfer, a.remote
	} else {
		out.Status = Lost
	}
	return out
}

// answer makes tries of try until one succeeds, a failure is permanent, ctx ends or the next
// backoff would pass deadline, appending each failure to out.Errors.
func (c *Client) answer(ctx context.Context, deadline time.Time, out *Outcome, try func() (answer, time.Duration, error)) (a answer, tries int, ok bool) {
	backoff := 40 * time.Millisecond
	for {
		tries++
		a, wait, err := try()
		if err == nil {
			return a, tries, true
		}
		out.Errors = append(out.Errors, err.Error())
		var perm errPermanent
		if errors.As(err, &perm) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return answer{}, tries, false
		}
		if wait < backoff {
			wait = backoff
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, time.Second)
	}
}

// abort sends a request the client gives up on: a cancel after a delay, or a stream it stops
// reading after a few chunks. It is not retried and not judged; what matters is that the
// server and the cache survive it.
func (c *Client) abort(ctx context.Context, op *Op, base string) Outcome {
	out := Outcome{Op: op, Cached: -1, Attempts: 1, Status: Cancelled}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if op.Kind == Cancel {
		t := time.AfterFunc(time.Duration(op.AbortAfterMillis)*time.Millisecond, cancel)
		defer t.Stop()
	}
	req, err := http.NewRequestWithContext(actx, "POST", base+op.Path, bytes.NewReader(op.Body))
	if err != nil {
		return out
	}
	c.headers(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	if op.Kind == Disconnect {
		sc := bufio.NewScanner(resp.Body)
		for n := 0; n < op.AbortChunks && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "data: ") {
				n++
			}
		}
		return out
	}
	io.Copy(io.Discard, resp.Body)
	return out
}

func (c *Client) headers(req *http.Request) {
	req.Header.Set("Content-Type", "application/json")
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
}

// try makes one attempt. wait is how long the server asked the client to wait (Retry-After).
func (c *Client) try(ctx context.Context, op *Op, base string, body []byte, stream bool) (answer, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+op.Path, bytes.NewReader(body))
	if err != nil {
		return answer{}, 0, errPermanent{err}
	}
	c.headers(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return answer{}, 0, fmt.Errorf("transport: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		var wait time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			wait = time.Duration(s) * time.Second
		}
		err := fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		if resp.StatusCode >= 500 || resp.StatusCode == 429 || resp.StatusCode == 408 {
			return answer{}, wait, err
		}
		return answer{}, 0, errPermanent{err}
	}
	chat := op.Path == "/v1/chat/completions"
	if stream {
		a, err := readStream(resp.Body, chat)
		return a, 0, err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, 0, fmt.Errorf("truncated body: %v", err)
	}
	a, err := parseAnswer(b, chat)
	return a, 0, err
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	Cache *struct {
		TransferTokens int `json:"transfer_tokens"`
		RemoteTokens   int `json:"remote_tokens"`
	} `json:"cache"`
}

// sources is usage.cache's transfer and remote tokens (0 when not reported).
func (u *usage) sources() (transfer, remote int) {
	if u == nil || u.Cache == nil {
		return 0, 0
	}
	return u.Cache.TransferTokens, u.Cache.RemoteTokens
}

func (u *usage) cached() int {
	if u == nil || u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens == nil {
		return -1
	}
	return *u.PromptTokensDetails.CachedTokens
}

type toolCall struct {
	Index    int `json:"index"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type choice struct {
	Text    string `json:"text"`
	Message *struct {
		Content   *string    `json:"content"`
		ToolCalls []toolCall `json:"tool_calls"`
	} `json:"message"`
	Delta *struct {
		Content   *string    `json:"content"`
		ToolCalls []toolCall `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type body struct {
	Choices []choice                  `json:"choices"`
	Usage   *usage                    `json:"usage"`
	Error   *struct{ Message string } `json:"error"`
}

// judged is the text an answer is judged by: the content, then each tool call as
// name(arguments).
func judged(content string, calls []toolCall) string {
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].Index < calls[j].Index })
	var b strings.Builder
	b.WriteString(content)
	for _, c := range calls {
		fmt.Fprintf(&b, "\x00%s(%s)", c.Function.Name, c.Function.Arguments)
	}
	return b.String()
}

func parseAnswer(b []byte, chat bool) (answer, error) {
	var r body
	if err := json.Unmarshal(b, &r); err != nil {
		return answer{}, fmt.Errorf("malformed body: %v", err)
	}
	if len(r.Choices) != 1 || r.Choices[0].FinishReason == nil || *r.Choices[0].FinishReason == "" {
		return answer{}, fmt.Errorf("malformed body: want one choice with a finish_reason: %.200s", b)
	}
	ch := r.Choices[0]
	a := answer{finish: *ch.FinishReason, cached: r.Usage.cached()}
	if r.Usage != nil {
		a.prompt = r.Usage.PromptTokens
		a.transfer, a.remote = r.Usage.sources()
	}
	if !chat {
		a.text = ch.Text
		return a, nil
	}
	if ch.Message == nil {
		return answer{}, fmt.Errorf("malformed body: a chat choice without a message")
	}
	content := ""
	if ch.Message.Content != nil {
		content = *ch.Message.Content
	}
	a.text = judged(content, ch.Message.ToolCalls)
	return a, nil
}

// readStream assembles a streamed answer; a stream that ends before its [DONE], or carries an
// error event, is a failed try.
func readStream(r io.Reader, chat bool) (answer, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var text strings.Builder
	calls := map[int]*toolCall{}
	a := answer{cached: -1}
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			if a.finish == "" {
				return answer{}, fmt.Errorf("malformed stream: [DONE] without a finish_reason")
			}
			var cs []toolCall
			for _, c := range calls {
				cs = append(cs, *c)
			}
			if chat {
				a.text = judged(text.String(), cs)
			} else {
				a.text = text.String()
			}
			return a, nil
		}
		var ev body
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return answer{}, fmt.Errorf("malformed stream: %v", err)
		}
		if ev.Error != nil {
			return answer{}, fmt.Errorf("stream error event: %s", ev.Error.Message)
		}
		if ev.Usage != nil {
			a.prompt, a.cached = ev.Usage.PromptTokens, ev.Usage.cached()
			a.transfer, a.remote = ev.Usage.sources()
		}
		for _, ch := range ev.Choices {
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				a.finish = *ch.FinishReason
			}
			if !chat {
				text.WriteString(ch.Text)
				continue
			}
			if ch.Delta == nil {
				continue
			}
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			for _, tc := range ch.Delta.ToolCalls {
				c := calls[tc.Index]
				if c == nil {
					c = &toolCall{Index: tc.Index}
					calls[tc.Index] = c
				}
				c.Function.Name += tc.Function.Name
				c.Function.Arguments += tc.Function.Arguments
			}
		}
	}
	return answer{}, fmt.Errorf("truncated stream: %v", sc.Err())
}
