package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type missReport struct {
	Cause   string `json:"cause"`
	Detail  string `json:"detail"`
	Offset  int    `json:"token_offset"`
	Block   int    `json:"block"`
	Matched int    `json:"matched_tokens"`
	Segment string `json:"segment"`
	Prompt  string `json:"prompt_text"`
	Cached  string `json:"cached_text"`
}

// missOf posts body to path and returns usage.cache.miss (nil when absent).
func missOf(t *testing.T, url, path string, body map[string]any) *missReport {
	t.Helper()
	code, out := post(t, url+path, body)
	if code != 200 {
		t.Fatalf("%s: status %d: %s", path, code, out)
	}
	var r struct {
		Usage struct {
			Cache struct {
				Miss *missReport `json:"miss"`
			} `json:"cache"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: %v: %s", path, err, out)
	}
	return r.Usage.Cache.Miss
}

// TestServeMissReport: through a real serve, a prompt that differs from a cached one by a
// timestamp, or by its salt, gets that cause in usage.cache.miss when it asks, and every
// miss is counted in stockpot_prefix_miss_total{cause}.
func TestServeMissReport(t *testing.T) {
	_, ts := newTestInstance(t, nil)
	system := func(stamp string) string {
		return "You are a careful assistant working for the records office. The current time is " + stamp +
			". Answer briefly, cite the document you used, and say so when you do not know."
	}
	chat := func(stamp string, report bool) map[string]any {
		return map[string]any{"max_tokens": 1, "temperature": 0, "cache_report": report, "messages": []map[string]any{
			{"role": "system", "content": system(stamp)},
			{"role": "user", "content": "Which documents mention the harbour extension, and when were they filed?"},
		}}
	}
	if m := missOf(t, ts.URL, "/v1/chat/completions", chat("2026-11-30T09:12:44Z", true)); m == nil || m.Cause != "new_content" {
		t.Fatalf("cold prompt: miss %+v, want new_content", m)
	}
	// Without cache_report the miss is counted but not sent.
	if m := missOf(t, ts.URL, "/v1/chat/completions", chat("2026-12-01T10:40:31Z", false)); m != nil {
		t.Fatalf("cache_report unset: usage.cache.miss %+v, want none", m)
	}
	m := missOf(t, ts.URL, "/v1/chat/completions", chat("2026-12-02T11:00:00Z", true))
	if m == nil || m.Cause != "timestamp" {
		t.Fatalf("timestamp changed: miss %+v, want timestamp", m)
	}
	if m.Offset < m.Matched || m.Offset >= m.Matched+16 || m.Block != m.Matched/16 {
		t.Errorf("offset %d block %d matched %d: want the offset inside the first block not reused", m.Offset, m.Block, m.Matched)
	}
	if !strings.Contains(m.Prompt, "2026-12-02") || !strings.Contains(m.Cached, "2026-1") || m.Segment != "system" {
		t.Errorf("report %+v: want the two stamps in the texts, in segment system", m)
	}

	long := longText(80)
	if m := missOf(t, ts.URL, "/v1/completions", map[string]any{"prompt": long, "max_tokens": 1, "cache_report": true}); m == nil || m.Cause != "new_content" {
		t.Fatalf("cold completion: miss %+v", m)
	}
	if m := missOf(t, ts.URL, "/v1/completions", map[string]any{"prompt": long, "max_tokens": 1, "cache_report": true}); m != nil {
		t.Fatalf("repeated completion: miss %+v, want none", m)
	}
	if m := missOf(t, ts.URL, "/v1/completions", map[string]any{"prompt": long, "max_tokens": 1, "cache_report": true, "cache_salt": "tenant-b"}); m == nil || m.Cause != "salt" || m.Offset != 0 {
		t.Fatalf("other salt: miss %+v, want salt at offset 0", m)
	}

	// Messages and Responses carry it in their usage.cache too.
	msgBody := map[string]any{"max_tokens": 1, "cache_report": true, "system": system("2026-12-03T08:00:00Z"),
		"messages": []map[string]any{{"role": "user", "content": "Which documents mention the harbour extension, and when were they filed?"}}}
	if m := missOf(t, ts.URL, "/v1/messages", msgBody); m == nil || m.Cause != "timestamp" {
		t.Errorf("messages: miss %+v, want timestamp", m)
	}
	respBody := map[string]any{"max_output_tokens": 1, "cache_report": true, "instructions": system("2026-12-04T08:00:00Z"),
		"input": "Which documents mention the harbour extension, and when were they filed?"}
	if m := missOf(t, ts.URL, "/v1/responses", respBody); m == nil || m.Cause != "timestamp" {
		t.Errorf("responses: miss %+v, want timestamp", m)
	}

	got := scrape(t, ts.URL)
	for cause, want := range map[string]float64{"timestamp": 4, "salt": 1, "new_content": 2} {
		if n := got[`stockpot_prefix_miss_total{cause="`+cause+`"}`]; n != want {
			t.Errorf("stockpot_prefix_miss_total{cause=%q} = %v, want %v", cause, n, want)
		}
	}
}

// TestServeMissEvicted: a small pool evicts a prompt's blocks under other traffic; the next
// request with that prompt is told they were evicted.
func TestServeMissEvicted(t *testing.T) {
	inst, ts := newTestInstance(t, func(o *serveOptions) { o.engine.KVMemory = 2 << 20 })
	total := inst.engine.Stats().KVBlocksTotal
	prompt := func(i int) map[string]any {
		return map[string]any{"prompt": strings.Repeat(fmt.Sprintf("document %d says: the harbour extension was filed in spring. ", i), 12),
			"max_tokens": 1, "cache_report": true}
	}
	// Used once, so not protected from eviction (reused blocks go last).
	missOf(t, ts.URL, "/v1/completions", prompt(0))
	for i := 1; inst.engine.Stats().Evictions < uint64(total); i++ {
		missOf(t, ts.URL, "/v1/completions", prompt(i))
		if i > 10*total {
			t.Fatalf("%d blocks, no eviction after %d prompts", total, i)
		}
	}
	if m := missOf(t, ts.URL, "/v1/completions", prompt(0)); m == nil || m.Cause != "evicted" {
		t.Fatalf("after evictions: miss %+v, want evicted", m)
	}
}
