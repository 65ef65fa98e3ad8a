package server

import (
	"encoding/json"
	"net/http"
	"time"

	"stockpot/internal/dashboard"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// The dashboard (GET /dashboard, its event stream /dashboard/events and its state as JSON,
// /dashboard/state): the page and the hub are internal/dashboard's; what they show is the
// server's own evidence — its Prometheus registry, a ring of the recent requests with their
// evidence chains, and the tree of what the working pool caches.

// recentRequests is how many finished requests the dashboard's ring keeps: enough to scroll
// a burst, small enough that the hello event stays a few tens of kilobytes.
const recentRequests = 64

// treeRoots and treeChildren bound the cache tree a snapshot carries.
const (
	treeRoots    = 12
	treeChildren = 6
)

// RequestRecord is one finished request on the dashboard, with its evidence chain: where each
// prompt block came from, what was restored (verified) or discarded and why, what was
// computed, and the TTFT split.
type RequestRecord struct {
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Status int       `json:"status"` // HTTP status; 499 = the client went away
	// Hit is the hit class: cold, partial or warm.
	Hit              string `json:"hit"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	BlockSize        int    `json:"block_size"`
	// MatchedBlocks are the prompt blocks reused, by tier (device: matched in the working
	// pool; host, disk, remote: restored from that tier after their checksum and identity
	// were verified).
	MatchedBlocks map[string]int `json:"matched_blocks"`
	// VerifiedBlocks are the restored blocks (every one passed verification to be used).
	VerifiedBlocks  int            `json:"verified_blocks"`
	DiscardedTokens int            `json:"discarded_tokens"`
	DiscardedBy     map[string]int `json:"discarded_by,omitempty"`
	ReusedTokens    int            `json:"reused_tokens"`
	ComputedTokens  int            `json:"computed_tokens"`
	// BlendedTokens kept a cached chunk's K/V (chunk blending): with ReusedTokens and
	// ComputedTokens they make up the prompt.
	BlendedTokens int `json:"blended_tokens,omitempty"`
	// PartialShare is the share of the prompt reused (reused / prompt).
	PartialShare float64 `json:"partial_share"`
	QueueMs      float64 `json:"queue_ms"`
	RestoreMs    float64 `json:"restore_ms"`
	PrefillMs    float64 `json:"prefill_ms"`
	TTFTMs       float64 `json:"ttft_ms"`
	DecodeMs     float64 `json:"decode_ms"`
	// Miss explains where and why the prompt left the cached chain, when the server does
	// (usage.cache.miss); absent otherwise.
	Miss any `json:"miss,omitempty"`
}

// dashboardState is the server's half of the dashboard.
type dashboardState struct {
	hub   *dashboard.Hub
	page  []byte
	feed  *dashboard.Feed[RequestRecord] // the recent requests
	notes *dashboard.Notes               // DashboardNote's
}

func newDashboardState(s *Server) *dashboardState {
	d := &dashboardState{page: dashboard.Page(dashboard.RoleServe)}
	cfg := dashboard.DefaultConfig()
	cfg.Sample = func() dashboard.Event { return dashboard.JSONEvent("snapshot", s.dashboardSnapshot()) }
	cfg.Hello = func() []dashboard.Event {
		evs := []dashboard.Event{dashboard.JSONEvent("snapshot", s.dashboardSnapshot()), dashboard.JSONEvent("requests", d.feed.Recent())}
		return append(evs, d.notes.Events()...)
	}
	d.hub = dashboard.NewHub(cfg)
	d.feed = dashboard.NewFeed[RequestRecord](d.hub, "request", recentRequests)
	d.notes = dashboard.NewNotes(d.hub, maxNoteSlots)
	return d
}

// record adds a finished request to the feed, which pushes it to the browsers. u is nil when the
// request ended without a usage (an error, or a client gone before its end).
func (d *dashboardState) record(status int, u *engine.Usage, blockSize int, at time.Time) {
	r := RequestRecord{At: at, Status: status, BlockSize: blockSize, MatchedBlocks: map[string]int{}}
	if u != nil {
		r.Hit = u.HitClass(blockSize).String()
		r.PromptTokens, r.CompletionTokens = u.PromptTokens, u.CompletionTokens
		for t := range kvtier.Tier(kvtier.Count) {
			n := u.TierTokens(t) / max(blockSize, 1)
			r.MatchedBlocks[t.String()] = n
			if t != kvtier.Device {
				r.VerifiedBlocks += n
			}
		}
		r.DiscardedTokens, r.DiscardedBy = u.DiscardedTokens, u.DiscardedBy
		r.ReusedTokens, r.ComputedTokens = u.CachedTokens(), u.ComputedTokens
		if u.Blend != nil {
			r.BlendedTokens = u.Blend.BlendedTokens
		}
		if u.PromptTokens > 0 {
			r.PartialShare = float64(r.ReusedTokens) / float64(u.PromptTokens)
		}
		r.QueueMs, r.RestoreMs, r.PrefillMs, r.TTFTMs, r.DecodeMs = u.QueueMs, u.RestoreMs, u.PrefillMs, u.TTFTMs, u.DecodeMs
		if m := u.Miss; m != nil && m.Cause != "" {
			r.Miss = map[string]any{"cause": m.Cause, "block": m.Block, "token_offset": m.Offset, "matched_tokens": m.Matched}
		}
	}
	d.feed.Add(r, func(r *RequestRecord, seq uint64) { r.Seq = seq })
}

// maxNoteSlots bounds the sticky notes.
const maxNoteSlots = 16

// DashboardNote pushes v (JSON) to the dashboard's browsers as an event of kind, and keeps the
// last one of each slot for browsers that connect later (they get them in the order they were
// noted). `stockpot demo` narrates its four modes this way (kind "demo", a slot per mode).
func (s *Server) DashboardNote(kind, slot string, v any) { s.dash.notes.Note(kind, slot, v) }

// DashboardClients is how many browsers stream the dashboard now.
func (s *Server) DashboardClients() int { return s.dash.hub.Stats().Clients }

// DashboardSnapshot is one sample of the server's evidence for the dashboard.
type DashboardSnapshot struct {
	TimeMs int64  `json:"t"`
	Role   string `json:"role"`
	Model  string `json:"model"`
	// Metrics is the server's registry, flattened (dashboard.Flatten): the same numbers
	// /metrics serves at that moment.
	Metrics   map[string]any     `json:"metrics"`
	BlockSize int                `json:"block_size"`
	Cache     *cacheView         `json:"cache,omitempty"`
	Stream    dashboard.HubStats `json:"stream"`
}

// cacheView is the working pool's contents as a tree of cached prefixes.
type cacheView struct {
	Blocks     int               `json:"blocks"`
	BlockBytes int64             `json:"block_bytes"`
	Pinned     int               `json:"pinned"`
	Tree       []*dashboard.Node `json:"tree"`
}

// cacheLister is what the tree needs from the generator; *engine.Engine has it, fakes may not.
type cacheLister interface {
	CachedBlocks(tokens int) []engine.CachedBlock
	Pins() []engine.PinInfo
}

func (s *Server) dashboardSnapshot() DashboardSnapshot {
	snap := DashboardSnapshot{TimeMs: s.cfg.Now().UnixMilli(), Role: "serve", Model: s.cfg.ModelName, BlockSize: s.cfg.BlockSize,
		Stream: s.dash.hub.Stats()}
	if s.gatherer != nil {
		snap.Metrics, _ = dashboard.Flatten(s.gatherer) // a collector's error leaves its series out
	}
	if cl, ok := s.gen.(cacheLister); ok {
		snap.Cache = s.cacheTree(cl)
	}
	return snap
}

// previewTokens is how many tokens of a node's first block its label shows.
const previewTokens = 12

func (s *Server) cacheTree(cl cacheLister) *cacheView {
	pinned := map[prefix.Hash]bool{}
	for _, p := range cl.Pins() {
		pinned[p.Hash] = true
	}
	cbs := cl.CachedBlocks(previewTokens)
	blocks := make([]dashboard.Block, len(cbs))
	for i, b := range cbs {
		blocks[i] = dashboard.Block{Hash: b.Hash, Parent: b.Parent, Depth: b.Depth, Hits: b.Hits, Pinned: pinned[b.Hash], Tokens: b.Tokens}
		if b.Depth == 0 {
			blocks[i].Parent = prefix.Hash{} // a chain's root is not a block
		}
	}
	v := &cacheView{Blocks: len(blocks), BlockBytes: s.gen.Stats().KVBlockBytes, Pinned: len(pinned),
		Tree: dashboard.Tree(blocks, s.cfg.BlockSize, treeRoots, treeChildren)}
	dashboard.Walk(v.Tree, func(n *dashboard.Node) {
		if bos := s.pipe.BOS(); n.FirstBlock == 0 && bos >= 0 && len(n.Preview) > 0 && n.Preview[0] == bos {
			n.Preview = n.Preview[1:]
		}
		n.Text = s.tok.Decode(n.Preview)
	})
	return v
}

func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing from anywhere: say so to the browser too.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	_, _ = w.Write(s.dash.page)
}

func (s *Server) handleDashboardEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead { // a HEAD gets the headers, not a stream that never ends
		w.Header().Set("Content-Type", "text/event-stream")
		return
	}
	s.dash.hub.ServeHTTP(w, r)
}

// handleDashboardState is the dashboard's state as one JSON document: the snapshot and the
// recent requests (for scripts, tests and `stockpot demo`).
func (s *Server) handleDashboardState(w http.ResponseWriter, r *http.Request) {
	notes := []json.RawMessage{}
	for _, ev := range s.dash.notes.Events() {
		notes = append(notes, ev.Data)
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshot": s.dashboardSnapshot(), "requests": s.dash.feed.Recent(), "notes": notes})
}

func isDashboardPath(p string) bool {
	return p == "/dashboard" || p == "/dashboard/events" || p == "/dashboard/state"
}
