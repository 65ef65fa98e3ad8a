package kvevents

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Handler serves GET /v1/kv-events (the stream) and GET
// /v1/kv-events/snapshot. Mount it at both paths (or at "/v1/kv-events" and
// "/v1/kv-events/"): a path ending in "/snapshot" gets the snapshot.
func (p *Publisher) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			http.Error(w, `{"error":{"message":"use GET","type":"invalid_request_error","code":"method_not_allowed"}}`, http.StatusMethodNotAllowed)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/snapshot") {
			p.serveSnapshot(w)
			return
		}
		p.serveStream(w, r)
	})
}

func (p *Publisher) serveSnapshot(w http.ResponseWriter) {
	s := p.Snapshot()
	ws := wireSnapshot{Epoch: epochString(s.Epoch), Seq: s.Seq, Identity: s.Identity, BlockSize: s.BlockSize,
		ReuseBlocks: s.ReuseBlocks, Blocks: make([]wireBlock, len(s.Blocks))}
	for i, b := range s.Blocks {
		ws.Blocks[i] = wireBlock{Hash: hex.EncodeToString(b.Hash[:]), Tier: b.Tier.String()}
	}
	if s.Costs != nil {
		ws.Costs = s.Costs.wire()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ws)
}

// streamBatch bounds the events copied per lock hold, so a far-behind reader
// holds the publisher's mutex for a few microseconds at a time.
const streamBatch = 256

func (p *Publisher) serveStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, haveSince := uint64(0), false
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, `{"error":{"message":"since: want a sequence number","type":"invalid_request_error","code":"invalid_since"}}`, http.StatusBadRequest)
			return
		}
		since, haveSince = n, true
	}
	epoch := epochString(p.cfg.Epoch)
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	p.mu.Lock()
	identity, bs, unit, latest := p.mu.identity, p.mu.blockSize, p.mu.reuseBlocks, p.mu.seq
	p.mu.Unlock()
	hello, _ := json.Marshal(wireMsg{Type: "hello", Epoch: epoch, Seq: latest, Identity: identity, BlockSize: bs, ReuseBlocks: unit})
	buf := append(hello, '\n')
	if !haveSince {
		since = latest
	}
	resync := func(seq uint64) []byte {
		b, _ := json.Marshal(wireMsg{Type: "resync", Epoch: epoch, Seq: seq})
		return append(b, '\n')
	}
	if e := q.Get("epoch"); e != "" && e != epoch {
		buf = append(buf, resync(latest)...)
		_, _ = w.Write(buf)
		return
	}
	// The cost figures go first and again whenever a heartbeat finds them changed.
	var sent Costs
	costsLine := func(b []byte, seq uint64) []byte {
		if c, ok := p.costs(); ok && c != sent {
			sent = c
			b = appendCostsJSON(b, seq, &c)
		}
		return b
	}
	buf = costsLine(buf, latest)
	// The load goes after them and again whenever it changes (LoadNotifier) or a load tick
	// finds it changed (load.go).
	var sentLoad Load
	loadLine := func(b []byte, seq uint64, always bool) []byte {
		if l, ok := p.load(); ok && (always || l != sentLoad) {
			sentLoad = l
			b = appendLoadJSON(b, seq, &l)
		}
		return b
	}
	buf = loadLine(buf, latest, true)
	if _, err := w.Write(buf); err != nil {
		return
	}
	if fl != nil {
		fl.Flush()
	}
	hb := time.NewTicker(p.cfg.Heartbeat)
	defer hb.Stop()
	lt := time.NewTicker(p.cfg.LoadInterval)
	defer lt.Stop()
	changed := p.loadChanged() // closed at the load's next change (LoadNotifier)
	sendLoad := func() bool {  // a load line if the load changed; false: the client left
		if buf = loadLine(buf[:0], latest, false); len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return false
			}
			if fl != nil {
				fl.Flush()
			}
		}
		return true
	}
	evs := make([]Event, 0, streamBatch)
	for {
		var ok bool
		var wake <-chan struct{}
		evs, latest, ok, wake = p.readFrom(evs[:0], since, streamBatch)
		if !ok {
			_, _ = w.Write(resync(latest))
			return
		}
		if len(evs) > 0 {
			buf = buf[:0]
			for i := range evs {
				buf = appendEventJSON(buf, &evs[i])
			}
			since = evs[len(evs)-1].Seq
			if _, err := w.Write(buf); err != nil {
				return
			}
			if fl != nil && since == latest {
				fl.Flush()
			}
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-changed:
			changed = p.loadChanged() // the next change's, before reading this one
			if !sendLoad() {
				return
			}
		case <-lt.C:
			if !sendLoad() {
				return
			}
		case t := <-hb.C:
			buf = buf[:0]
			buf = append(buf, `{"type":"heartbeat","seq":`...)
			buf = strconv.AppendUint(buf, latest, 10)
			buf = append(buf, `,"time":`...)
			buf = strconv.AppendInt(buf, t.UnixNano(), 10)
			buf = append(buf, "}\n"...)
			buf = costsLine(buf, latest)
			if _, err := w.Write(buf); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}
