package pipeline

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"

	"stockpot/internal/api"
	"stockpot/internal/grammar"
	"stockpot/internal/toolcall"
)

// Constrained decoding's grammars cost before they are used: a schema is parsed, built into
// a node graph and compiled, all in proportion to its grammar, which a few hundred KB of
// anyOf makes a million ops. So a grammar is paid for in four steps, each bounded:
//
//  1. Sized: every schema of the request (response_format's, or each callable tool's
//     parameters) is estimated by one walk of its parsed document (grammar.EstimateSchema),
//     and the request is refused with a 400 naming the field when the sum is over
//     GrammarConfig.MaxBytes, before anything is built.
//  2. Looked up: compiled grammars are cached by a hash of what they constrain (the schema
//     or tools, the family's markup); the same schema is compiled once and its grammar, which
//     is immutable and carries its own per-vocabulary tables under their own locks, is
//     shared by every matcher. The cache is bounded by bytes (grammar.Grammar.Bytes, tables
//     included) and drops the least recently used.
//  3. Waited for: concurrent requests for one grammar share one compile (single flight);
//     distinct compiles run at most GrammarConfig.Compiles at a time. A waiter leaves when
//     its request's context ends, and a queue already GrammarConfig.MaxWaiting deep answers
//     429 at once.
//  4. Compiled under grammar.Limits, so a grammar the estimate misjudged still stops at its
//     bound (a 400) rather than after.

// GrammarConfig bounds constrained decoding's grammars. Zero fields take the defaults of
// DefaultGrammarConfig.
type GrammarConfig struct {
	// MaxBytes bounds one request's grammar: the estimate of its schemas, and what each
	// compile may allocate (grammar.Limits.MaxBytes). --grammar-max-bytes.
	MaxBytes int64
	// MaxSteps bounds one compile's work (grammar.Limits.MaxSteps).
	MaxSteps int64
	// Memory is what grammars may hold in all (--grammar-memory): half for the cache of
	// compiled grammars (CacheBytes, unless set), half for compiles in progress, each of
	// which may take about twice MaxBytes (its node graph, then its ops), which sets
	// Compiles unless it is set.
	Memory int64
	// Compiles is how many grammars compile at once.
	Compiles int
	// MaxWaiting is how many requests may wait for a compile slot; more are answered 429.
	MaxWaiting int
	// CacheBytes bounds the compiled grammars kept, their tables included.
	CacheBytes int64
}

// DefaultGrammarConfig returns the defaults.
func DefaultGrammarConfig() GrammarConfig {
	d := grammar.DefaultLimits()
	return GrammarConfig{
		MaxBytes: d.MaxBytes,
		MaxSteps: d.MaxSteps,
		// 256 MiB: a cache of 128 MiB, room for dozens of ordinary grammars with their mask
		// memos, and one compile of the largest grammar admitted at a time.
		Memory:     256 << 20,
		MaxWaiting: 64,
	}
}

// withDefaults fills zero fields from DefaultGrammarConfig.
func (c GrammarConfig) withDefaults() GrammarConfig {
	d := DefaultGrammarConfig()
	if c.MaxBytes <= 0 {
		c.MaxBytes = d.MaxBytes
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = d.MaxSteps
	}
	if c.Memory <= 0 {
		c.Memory = d.Memory
	}
	if c.Compiles <= 0 {
		// A compile is a CPU-bound burst: at most a quarter of the cores, so decoding keeps
		// its share, and as many as half of Memory holds.
		c.Compiles = int(max(1, min(int64(runtime.GOMAXPROCS(0)/4), c.Memory/2/(2*c.MaxBytes))))
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = d.MaxWaiting
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = c.Memory / 2
	}
	return c
}

func (c GrammarConfig) limits() grammar.Limits {
	return grammar.Limits{MaxBytes: c.MaxBytes, MaxSteps: c.MaxSteps}
}

// grammarKey names a compiled grammar: what it constrains and how the family writes it.
type grammarKey struct {
	family        toolcall.Family
	before, after string // the family's markup around the answer (toolcall.Frame)
	kind          string // json_object, json_schema or tools
	spec          string // the schema, or the tools and choice
}

// grammarID is a grammarKey's SHA-256: the cache keeps 32 bytes per grammar, not its schema.
// A pipeline has one vocabulary, and a compiled grammar does not depend on it (its tables
// are kept per vocabulary inside it), so the vocabulary is not part of the key.
type grammarID [32]byte

func (k grammarKey) id() grammarID {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{string(k.family), k.before, k.after, k.kind, k.spec} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var id grammarID
	h.Sum(id[:0])
	return id
}

// grammarCache keeps compiled grammars by key within CacheBytes, dropping the least recently
// used; it compiles each key once however many ask at a time, and at most Compiles keys at
// once. Its zero value is ready: the config is read on first use.
type grammarCache struct {
	once sync.Once
	cfg  GrammarConfig
	sem  chan struct{} // a token per running compile
	mu   struct {
		sync.Mutex
		byID     map[grammarID]*list.Element // of *grammarEntry; protected by mu
		lru      list.List                   // front: most recently used
		bytes    int64                       // sum of entries' charged bytes
		inflight map[grammarID]*grammarFlight
		waiting  int // requests waiting for a compile slot
		compiles int // compiles run (tests)
	}
}

type grammarEntry struct {
	id    grammarID
	g     *grammar.Grammar
	bytes int64 // what the entry is charged: g.Bytes() when it was last used
}

// grammarFlight is one compile that other requests for the same key wait on.
type grammarFlight struct {
	done chan struct{}
	g    *grammar.Grammar
	err  error
}

// errFlightAbandoned marks a flight whose leader left before compiling (its context ended
// while it waited for a slot): its followers try again themselves.
var errFlightAbandoned = errors.New("pipeline: grammar compile abandoned")

func (c *grammarCache) init(cfg GrammarConfig) {
	c.once.Do(func() {
		c.cfg = cfg.withDefaults()
		c.sem = make(chan struct{}, c.cfg.Compiles)
		c.mu.byID = map[grammarID]*list.Element{}
		c.mu.inflight = map[grammarID]*grammarFlight{}
	})
}

// get returns the grammar for key. On a miss admit sizes it (before any wait for a slot: a
// refusal costs nothing more) and build compiles it, one build per key at a time and at most
// Compiles builds at once. Errors are not kept. A caller whose ctx ends while it waits gets a
// 503.
func (c *grammarCache) get(ctx context.Context, cfg GrammarConfig, key grammarKey, admit func() error, build func() (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	c.init(cfg)
	id := key.id()
	for {
		c.mu.Lock()
		if e, ok := c.mu.byID[id]; ok {
			c.mu.lru.MoveToFront(e)
			ent := e.Value.(*grammarEntry)
			// its tables grew since: charge what it holds now
			c.mu.bytes += ent.g.Bytes() - ent.bytes
			ent.bytes = ent.g.Bytes()
			c.evictLocked(e)
			c.mu.Unlock()
			return ent.g, nil
		}
		if f, ok := c.mu.inflight[id]; ok {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, grammarWaitError(ctx)
			}
			if f.err == errFlightAbandoned {
				continue
			}
			return f.g, f.err
		}
		f := &grammarFlight{done: make(chan struct{})}
		c.mu.inflight[id] = f
		c.mu.Unlock()
		if f.err = admit(); f.err == nil {
			f.g, f.err = c.compile(ctx, build)
		}
		c.mu.Lock()
		delete(c.mu.inflight, id)
		if f.err == nil {
			c.addLocked(id, f.g)
		}
		c.mu.Unlock()
		close(f.done)
		if f.err == errFlightAbandoned {
			return nil, grammarWaitError(ctx)
		}
		return f.g, f.err
	}
}

// compile runs build in a compile slot, waiting for one while ctx lasts.
func (c *grammarCache) compile(ctx context.Context, build func() (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	select {
	case c.sem <- struct{}{}:
	default:
		c.mu.Lock()
		if c.mu.waiting >= c.cfg.MaxWaiting {
			c.mu.Unlock()
			return nil, &api.Error{Status: http.StatusTooManyRequests, Type: api.TypeInvalidRequest, Code: "rate_limit_exceeded",
				Message: fmt.Sprintf("too many requests are waiting to compile a grammar for constrained decoding (%d compile at once within --grammar-memory, and %d wait); retry shortly",
					c.cfg.Compiles, c.cfg.MaxWaiting)}
		}
		c.mu.waiting++
		c.mu.Unlock()
		acquired := false
		select {
		case c.sem <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		c.mu.Lock()
		c.mu.waiting--
		c.mu.Unlock()
		if !acquired {
			return nil, errFlightAbandoned
		}
	}
	defer func() { <-c.sem }()
	c.mu.Lock()
	c.mu.compiles++
	c.mu.Unlock()
	return build()
}

// grammarWaitError is the answer to a request that stopped waiting for a compile.
func grammarWaitError(ctx context.Context) error {
	return api.Unavailable("gave up waiting for a grammar compile slot for constrained decoding (%v); retry", context.Cause(ctx))
}

// addLocked keeps g under id and evicts down to CacheBytes. REQUIRES: c.mu held.
func (c *grammarCache) addLocked(id grammarID, g *grammar.Grammar) {
	if _, ok := c.mu.byID[id]; ok {
		return
	}
	ent := &grammarEntry{id: id, g: g, bytes: g.Bytes()}
	e := c.mu.lru.PushFront(ent)
	c.mu.byID[id] = e
	c.mu.bytes += ent.bytes
	c.evictLocked(e)
}

// evictLocked drops least recently used entries other than keep while the cache is over
// CacheBytes (an entry larger than the whole cache is dropped at once). REQUIRES: c.mu held.
func (c *grammarCache) evictLocked(keep *list.Element) {
	for c.mu.bytes > c.cfg.CacheBytes {
		e := c.mu.lru.Back()
		if e == keep {
			if e.Prev() == nil {
				// keep alone: over the whole cache by itself, it is not kept
				c.removeLocked(e)
				return
			}
			e = e.Prev()
		}
		c.removeLocked(e)
	}
}

func (c *grammarCache) removeLocked(e *list.Element) {
	ent := e.Value.(*grammarEntry)
	c.mu.lru.Remove(e)
	delete(c.mu.byID, ent.id)
	c.mu.bytes -= ent.bytes
}

// stats reports the cache's entries, bytes and compiles run (tests).
func (c *grammarCache) stats() (entries int, bytes int64, compiles int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.byID), c.mu.bytes, c.mu.compiles
}

// grammarBudgetError turns a grammar's *grammar.BudgetError into the 400 naming param.
func grammarBudgetError(param string, be *grammar.BudgetError) error {
	return api.Invalid(param, "%s: %s (--grammar-max-bytes); constrained decoding needs a smaller schema", param, strings.TrimPrefix(be.Error(), "grammar: "))
}

// grammarParam is the request field a grammar of kind comes from, for errors about the whole.
func grammarParam(kind string) string {
	switch kind {
	case "json_schema":
		return "response_format.json_schema.schema"
	case "tools":
		return "tools"
	}
	return "response_format"
}

// admitTools sizes a forced call's grammar before it is built: each callable tool's
// parameters (estimated by one walk) and its envelope, once per parallel call. One tool over
// the bound is named; tools that pass alone but not together are refused as "tools".
func admitTools(tools []api.Tool, choice api.ToolChoice, lim grammar.Limits, markup int) error {
	total := grammar.EstimateLiteral(markup)
	n := 0
	for i, t := range tools {
		if !choice.Callable(t.Name) {
			continue
		}
		param := fmt.Sprintf("tools[%d].function.parameters", i)
		est := grammar.EstimateObject()
		if t.Parameters != nil {
			e, err := grammar.EstimateSchema(t.Parameters, grammar.SchemaOptions{Strict: t.Strict, Limits: lim})
			if err != nil {
				return schemaError(param, err)
			}
			est = e
		}
		est += grammar.EstimateLiteral((len(t.Name) + 32) * maxParallelCalls)
		if err := lim.Admit(est); err != nil {
			return schemaError(param, err)
		}
		total += est
		n++
	}
	if err := lim.Admit(total); err != nil {
		be := err.(*grammar.BudgetError)
		return api.Invalid("tools", "tools: the %d callable tools' grammar is estimated at %s to compile together, over the bound of %s (--grammar-max-bytes); constrained decoding needs fewer or smaller tools",
			n, grammar.FormatBytes(be.Amount), grammar.FormatBytes(be.Limit))
	}
	return nil
}
