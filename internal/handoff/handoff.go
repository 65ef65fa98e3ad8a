package handoff

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// Role is a replica's part in prefill/decode disaggregation.
type Role string

const (
	RoleBoth    Role = "both"    // prefill and decode on one replica (no handoff)
	RolePrefill Role = "prefill" // computes prompts and hands their blocks over
	RoleDecode  Role = "decode"  // pulls prompts' blocks and decodes
)

// ParseRole reads --role.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleBoth, RolePrefill, RoleDecode:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want both, prefill or decode)", s)
}

// Prefills reports whether a replica of role r answers prefill requests (do_remote_decode).
func (r Role) Prefills() bool { return r == RoleBoth || r == RolePrefill }

// Decodes reports whether a replica of role r takes handed-off prompts (do_remote_prefill).
func (r Role) Decodes() bool { return r == RoleBoth || r == RoleDecode }

// TransferPath is the prefix of the pull endpoint: GET TransferPath + ID streams the
// transfer's blocks.
const TransferPath = "/v1/kv/transfer/"

// Headers of a pull.
const (
	// HeaderRoot carries the decode's chain root (hex) of the prompt: the prefill refuses a
	// pull whose root is not the transfer's (another tenant's, or another model's).
	HeaderRoot = "X-Stockpot-Root"
	// HeaderBlocks, on the answer, is how many blocks the transfer covers.
	HeaderBlocks = "X-Stockpot-Blocks"
)

// Codec turns the engine's blocks into tier records and back: a transfer's frames are the
// very records the tiers keep, verified by the decode as every restore verifies them.
type Codec struct {
	Identity [32]byte
	Layout   kvcache.Layout
	Keys     *tier.Keyring // sign (and so require) MACs, as the shared tiers do; nil: none
	Stateful bool          // a hybrid: a block is complete only with its state checkpoint
}

// Record encodes one exported block.
func (c Codec) Record(ev prefix.Event, kv, state []byte) ([]byte, error) {
	r := tier.Record{Identity: c.Identity, Root: ev.Root, Hash: ev.Hash, Parent: ev.Parent, Tokens: ev.Tokens,
		Layout: c.Layout, KV: kv, StateComplete: !c.Stateful || state != nil}
	if state != nil {
		r.Aux = [][]byte{state}
	}
	return r.EncodeSigned(c.Keys)
}

// Transfer is one prompt a prefill replica computed and holds for a decode replica.
type Transfer struct {
	ID      string
	Root    prefix.Hash
	Salt    string  // the engine's salt of the prompt (tenant and key folded in)
	Prompt  []int32 // the prompt's tokens
	Blocks  int     // full blocks a decode may take: prefix.MaxMatchBlocks of the prompt
	Expires time.Time

	served  []bool // blocks a pull has taken (under the registry's lock)
	servedN int
}

// Registry remembers the transfers a prefill replica holds, until they are pulled or their
// lease expires. Safe for concurrent use.
type Registry struct {
	lease time.Duration
	max   int
	mu    struct {
		sync.Mutex
		m       map[string]*Transfer
		order   []string // insertion order, for dropping the oldest past max
		expired uint64
	}
}

// DefaultLease is how long a prefill holds a transfer's blocks for its decode.
const DefaultLease = 30 * time.Second

// maxTransfers bounds the registry: a transfer costs its prompt's ids and a few words.
const maxTransfers = 4096

// NewRegistry returns a registry whose transfers expire lease after they are added.
func NewRegistry(lease time.Duration) *Registry {
	if lease <= 0 {
		lease = DefaultLease
	}
	r := &Registry{lease: lease, max: maxTransfers}
	r.mu.m = map[string]*Transfer{}
	return r
}

// Lease is the registry's lease.
func (r *Registry) Lease() time.Duration { return r.lease }

// NewID returns a fresh transfer id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "xfer-" + hex.EncodeToString(b[:])
}

// Add keeps t (its Expires set now + the lease), dropping expired transfers and, past the
// bound, the oldest.
func (r *Registry) Add(t Transfer, now time.Time) *Transfer {
	t.Expires = now.Add(r.lease)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	for len(r.mu.order) >= r.max {
		delete(r.mu.m, r.mu.order[0])
		r.mu.order = r.mu.order[1:]
		r.mu.expired++
	}
	r.mu.m[t.ID] = &t
	r.mu.order = append(r.mu.order, t.ID)
	return &t
}

// Get returns the unexpired transfer id.
func (r *Registry) Get(id string, now time.Time) (*Transfer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.mu.m[id]
	if !ok || now.After(t.Expires) {
		return nil, false
	}
	return t, true
}

// Served records that a pull took blocks [from, from+n) of transfer id. It reports whether
// every block has now been taken (the transfer is then forgotten: its lease can end).
// A pull extends the lease: the transfer is held a lease past now.
func (r *Registry) Served(id string, from, n int, now time.Time) (*Transfer, bool) {
	r.mu.Lock()
	t, ok := r.mu.m[id]
	if !ok {
		r.mu.Unlock()
		return nil, false
	}
	if t.served == nil {
		t.served = make([]bool, t.Blocks)
	}
	t.Expires = later(t.Expires, now.Add(r.lease)) // a pull under way keeps the transfer
	for i := max(from, 0); i < min(from+n, t.Blocks); i++ {
		if !t.served[i] {
			t.served[i] = true
			t.servedN++
		}
	}
	whole := t.servedN == t.Blocks
	r.mu.Unlock()
	if whole {
		r.Done(id)
	}
	return t, whole
}

// Done forgets a transfer its decode took whole.
func (r *Registry) Done(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.mu.m[id]; ok {
		delete(r.mu.m, id)
		for i, o := range r.mu.order {
			if o == id {
				r.mu.order = append(r.mu.order[:i], r.mu.order[i+1:]...)
				break
			}
		}
	}
}

// Stats returns how many transfers are held and how many expired unpulled so far.
func (r *Registry) Stats(now time.Time) (held int, expired uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked(now)
	return len(r.mu.m), r.mu.expired
}

func (r *Registry) sweepLocked(now time.Time) {
	keep := r.mu.order[:0]
	for _, id := range r.mu.order {
		if t := r.mu.m[id]; t != nil && now.After(t.Expires) {
			delete(r.mu.m, id)
			r.mu.expired++
			continue
		}
		keep = append(keep, id)
	}
	r.mu.order = keep
}

// Exporter is what a prefill replica's engine does for a pull (*engine.Engine has it).
type Exporter interface {
	ExportBlocks(salt string, prompt []int32, from, to int, fn func(ev prefix.Event, kv, state []byte)) int
}

// exportBatch is how many blocks one ExportBlocks call copies out of the pool: the runner is
// held for that many blocks' copies at a time.
const exportBatch = 16

// WriteBlocks writes blocks [from, to) of t to w as frames (a 4-byte big-endian length, then
// a record), in order, ending with a zero-length frame once every block the pool still held
// was written. It stops at the first block the pool no longer holds (the lease expired and it
// was evicted): the decode computes the rest. It returns the blocks and bytes written.
func WriteBlocks(w io.Writer, ex Exporter, c Codec, t *Transfer, from, to int) (blocks int, bytes int64, err error) {
	to = min(to, t.Blocks)
	var hdr [4]byte
	for i := from; i < to; {
		end := min(i+exportBatch, to)
		var recs [][]byte
		var encErr error
		n := ex.ExportBlocks(t.Salt, t.Prompt, i, end, func(ev prefix.Event, kv, state []byte) {
			if encErr != nil {
				return
			}
			b, e := c.Record(ev, kv, state)
			if e != nil {
				encErr = e
				return
			}
			recs = append(recs, b)
		})
		if encErr != nil {
			return blocks, bytes, encErr
		}
		for _, b := range recs {
			binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
			if _, err := w.Write(hdr[:]); err != nil {
				return blocks, bytes, err
			}
			if _, err := w.Write(b); err != nil {
				return blocks, bytes, err
			}
			blocks++
			bytes += int64(4 + len(b))
		}
		if n < end-i {
			break // evicted: the rest is not held
		}
		i = end
	}
	binary.BigEndian.PutUint32(hdr[:], 0)
	_, err = w.Write(hdr[:])
	return blocks, bytes, err
}

// ErrFrame is a stream that does not parse as frames.
var ErrFrame = errors.New("handoff: malformed transfer stream")

// ReadFrames reads frames from r until the end frame, calling fn with each record, a slice
// of its own that fn may keep. A record larger than maxRecord, a stream that ends without its
// end frame, or more than maxFrames frames is ErrFrame.
func ReadFrames(r io.Reader, maxRecord, maxFrames int, fn func(i int, rec []byte) error) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [4]byte
	for i := 0; ; i++ {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return i, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n == 0 {
			return i, nil
		}
		if n > maxRecord || i >= maxFrames {
			return i, fmt.Errorf("%w: frame %d of %d bytes (at most %d frames of %d)", ErrFrame, i, n, maxFrames, maxRecord)
		}
		buf := make([]byte, n) // the caller keeps it: no copy after the read
		if _, err := io.ReadFull(br, buf); err != nil {
			return i, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		if err := fn(i, buf); err != nil {
			return i, err
		}
	}
}

// Peers is the set of prefill replicas a decode replica may pull from (--prefill-peer), by
// host:port. A transfer naming any other address is refused: a decode never connects to an
// address a client chose.
type Peers struct {
	byAddr map[string]string // host:port -> base URL
}

// ParsePeers reads --prefill-peer URLs (http or https, host:port, no path).
func ParsePeers(urls []string) (*Peers, error) {
	p := &Peers{byAddr: map[string]string{}}
	for _, u := range urls {
		rest, ok := strings.CutPrefix(u, "http://")
		scheme := "http://"
		if !ok {
			if rest, ok = strings.CutPrefix(u, "https://"); !ok {
				return nil, fmt.Errorf("--prefill-peer %q: want http://host:port or https://host:port", u)
			}
			scheme = "https://"
		}
		rest = strings.TrimSuffix(rest, "/")
		host, port, err := net.SplitHostPort(rest)
		if err != nil || host == "" || strings.ContainsAny(rest, "/?#@") {
			return nil, fmt.Errorf("--prefill-peer %q: want http://host:port", u)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, fmt.Errorf("--prefill-peer %q: bad port", u)
		}
		p.byAddr[net.JoinHostPort(host, port)] = scheme + net.JoinHostPort(host, port)
	}
	return p, nil
}

// Lookup returns the base URL of the configured peer at host:port.
func (p *Peers) Lookup(host string, port int) (string, bool) {
	if p == nil {
		return "", false
	}
	u, ok := p.byAddr[net.JoinHostPort(host, strconv.Itoa(port))]
	return u, ok
}

// Len is how many peers are configured.
func (p *Peers) Len() int {
	if p == nil {
		return 0
	}
	return len(p.byAddr)
}

// Puller pulls transfers from prefill peers into a decode replica's transfer buffer.
type Puller struct {
	Client *http.Client
	Peers  *Peers
	Key    string // sent as the bearer key (--backend-key); "" for none
	// Streams is how many ranges of one transfer are pulled at once.
	Streams int
	// Put keeps pulled records (offload.Tiers.PutTransfer).
	Put func(ctx context.Context, items []tier.Item) error
	// MaxRecord bounds one frame (a record of the model's layout, state included).
	MaxRecord int
	// Timeout bounds one whole pull (0: none), so a peer that accepts and then stalls costs
	// the request at most this long before the decode computes what is missing.
	Timeout time.Duration
}

// PullResult is what a pull brought.
type PullResult struct {
	Blocks  int // records received and kept, from the first block, with no gap
	Bytes   int64
	Elapsed time.Duration
	Keys    []tier.Key // what to drop once the request no longer needs them
}

// putBatch is how many records a stream keeps at once.
const putBatch = 16

// Pull fetches blocks [0, n) of transfer id from base (a configured peer), the chain hashes
// being those of the decode's own prompt under root, over up to Streams streams of
// contiguous ranges. The records are kept under the decode's own keys, not the ones the
// prefill names: a record of another chain never verifies when restored. The result counts
// the blocks received from the first with no gap; an error says why the pull stopped short
// (the decode computes what is missing).
func (p *Puller) Pull(ctx context.Context, base, id string, root prefix.Hash, hashes []prefix.Hash) (PullResult, error) {
	start := time.Now()
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	n := len(hashes)
	streams := max(1, min(p.Streams, (n+putBatch-1)/putBatch))
	type part struct {
		from, to, got int
		bytes         int64
		err           error
	}
	parts := make([]part, streams)
	per := (n + streams - 1) / max(streams, 1)
	var wg sync.WaitGroup
	for s := range parts {
		parts[s].from, parts[s].to = min(s*per, n), min((s+1)*per, n)
		if parts[s].from >= parts[s].to {
			continue
		}
		wg.Add(1)
		go func(pt *part) {
			defer wg.Done()
			pt.got, pt.bytes, pt.err = p.pullRange(ctx, base, id, root, hashes, pt.from, pt.to)
		}(&parts[s])
	}
	wg.Wait()
	res := PullResult{Elapsed: time.Since(start)}
	var firstErr error
	contiguous := true
	for _, pt := range parts {
		res.Bytes += pt.bytes
		for i := pt.from; i < pt.from+pt.got; i++ {
			res.Keys = append(res.Keys, tier.Key{Root: root, Hash: hashes[i]})
		}
		if contiguous {
			res.Blocks += pt.got
			contiguous = pt.got == pt.to-pt.from
		}
		if pt.err != nil && firstErr == nil {
			firstErr = pt.err
		}
	}
	if firstErr == nil && res.Blocks < n {
		firstErr = fmt.Errorf("handoff: the prefill held %d of %d blocks (its lease expired?)", res.Blocks, n)
	}
	return res, firstErr
}

// pullRange pulls blocks [from, to) over one stream.
func (p *Puller) pullRange(ctx context.Context, base, id string, root prefix.Hash, hashes []prefix.Hash, from, to int) (got int, bytes int64, err error) {
	u := fmt.Sprintf("%s%s%s?from=%d&to=%d", base, TransferPath, id, from, to)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set(HeaderRoot, root.String())
	if p.Key != "" {
		req.Header.Set("Authorization", "Bearer "+p.Key)
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, 0, fmt.Errorf("handoff: pull %s: HTTP %d: %s", id, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var batch []tier.Item
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := p.Put(ctx, batch)
		batch = nil
		return err
	}
	n, err := ReadFrames(resp.Body, p.MaxRecord, to-from, func(i int, rec []byte) error {
		batch = append(batch, tier.Item{Key: tier.Key{Root: root, Hash: hashes[from+i]}, Value: rec})
		bytes += int64(4 + len(rec))
		if len(batch) == putBatch {
			if err := flush(); err != nil {
				return err
			}
			got = from + i + 1 - from
		}
		return nil
	})
	if ferr := flush(); ferr == nil {
		got = n
	} else if err == nil {
		err = ferr
	}
	return got, bytes, err
}

// Source serves a prefill replica's transfers: GET TransferPath + ID?from=F&to=T, with the
// decode's chain root in HeaderRoot, streams blocks [F, T) as frames (WriteBlocks). A
// transfer that is unknown or expired is a 404, a root that is not the transfer's a 403: a
// decode gets only the blocks of a prompt it holds itself, under its own tenant's salt.
type Source struct {
	Registry *Registry
	Exporter Exporter
	Codec    Codec
	Now      func() time.Time
	// Served, when set, hears of every pull: blocks and bytes written, the time taken and
	// how it ended (nil: the whole range).
	Served func(blocks int, bytes int64, d time.Duration, err error)
	// Release, when set, ends a transfer's lease once its decode took every block (the
	// engine's EndLease): the blocks stay cached, unpinned.
	Release func(t *Transfer)
}

// ServeHTTP serves one pull. Errors are in the API's shape (writeErr).
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request, writeErr func(http.ResponseWriter, error)) {
	start := time.Now()
	id := strings.TrimPrefix(r.URL.Path, TransferPath)
	t, ok := s.Registry.Get(id, s.Now())
	if !ok {
		writeErr(w, apiError(http.StatusNotFound, "transfer_not_found",
			fmt.Sprintf("no transfer %q on this replica: it was never made here, or its lease expired", truncate(id, 64))))
		return
	}
	if r.Header.Get(HeaderRoot) != t.Root.String() {
		writeErr(w, apiError(http.StatusForbidden, "transfer_root_mismatch", "the transfer's prompt is under another chain root (another tenant or model) than "+HeaderRoot+" names"))
		return
	}
	q := r.URL.Query()
	from, to := 0, t.Blocks
	if v := q.Get("from"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeErr(w, apiError(http.StatusBadRequest, "invalid_request", "from must be a block index"))
			return
		}
		from = n
	}
	if v := q.Get("to"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < from {
			writeErr(w, apiError(http.StatusBadRequest, "invalid_request", "to must be a block index not below from"))
			return
		}
		to = min(n, t.Blocks)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(HeaderBlocks, strconv.Itoa(t.Blocks))
	w.WriteHeader(http.StatusOK)
	blocks, bytes, err := WriteBlocks(w, s.Exporter, s.Codec, t, from, to)
	if err == nil {
		if tt, whole := s.Registry.Served(id, from, blocks, s.Now()); whole && s.Release != nil {
			s.Release(tt)
		}
	}
	if s.Served != nil {
		s.Served(blocks, bytes, time.Since(start), err)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
