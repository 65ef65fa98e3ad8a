package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/kvtier"
	"stockpot/internal/miss"
	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// coreScenario steps a Core from testdata/core/*.txt scripts, with no model, no runner and no
// clock: the script says what time it is and the fake model decides each next token. The block
// cache is the real prefix.Cache (pure, and tested against its own oracle) behind the same
// cacheAdapter the engine uses, so the scripts also cover the adapter.
//
// Commands (id= names a request; token lists take ids and ranges, e.g. tokens=(1-8,99)):
//
//	new blocks=N [block-size=B] [batch=T] [running=R] [ctx=L] [eog=(…)] [prefix=false]
//	    [dedup=false] [prefetch=wait|timeout|best-effort|cost] [prefetch-timeout=D] [pin-budget=N]
//	    [pin-owners=(CAP,…)] [checkpoint=N [checkpoint-budget=K]]
//	                                     pin-owners: CoreConfig.PinOwners (owner i+1's cap in
//	                                     blocks, 0 none); the owners' pin use then prints after
//	                                     each command as pin-use=USE/SHARE,… from owner 0
//	                                     checkpoint: a hybrid model, its recurrent state kept
//	                                     at every N-th block end (a fake stateIndex of at most
//	                                     K checkpoints); plans print their checkpoints (ckpt=),
//	                                     admissions their resume point
//	add id=I tokens=(…) [max=N] [stop=(…)] [ignore-eos] [salt=S] [allow=TOK done-after=K]
//	    [pin=(TOKENS:TTL,…)] [strict] [max-offload=N]
//	                                     (a done request prints its pins as
//	                                     pinned/requested@TTL+created [refused] [limit=WHY])
//	                                     Core.Add at the current time; allow: a constraint that
//	                                     allows only TOK and is done after K of them; pin: the
//	                                     request's PinSpecs; strict: PinStrict, reserved first
//	                                     with ReservePins (a refusal is printed, nothing added);
//	                                     max-offload: Request.MaxOffloadTokens
//	pins                                 Core.Pins (expires is shown relative to time 0)
//	expire                               Core.ExpirePins at the current time
//	unpin [from-depth=D]                 Core.Unpin of every pin at depth >= D (default 0)
//	known tokens=(…) ttl=D expires=D     Core.AdoptPins of every full block of tokens
//	prefetching id=I                     Core.Prefetching (a Restorer started for I)
//	prefetched id=I first=F blocks=N [tier=host|disk|remote] [elapsed=D] [discarded=REASON:K]
//	    [in-place] [state=(…)]           in-place: the blocks were verified into the reservation;
//	                                     state: the prompt blocks among them that come with a
//	                                     verified checkpoint
//	states                               the checkpoints held (hybrid), by chain depth
//	drop-state tokens=(…) block=K        forget the checkpoint of block K of tokens (hybrid)
//	progress id=I blocks=N arrived=K restore=D recompute=D
//	                                     Core.PrefetchProgressed at the current time: the
//	                                     prefetch's plan (N blocks, the cost model's estimates
//	                                     of reading and of recomputing them), K arrived so far
//	reserve id=I first=F n=N             Core.Reserve (an IntoRestorer started for I); prints
//	                                     the reserved blocks
//	reserved                             blocks reserved now (CoreStats.ReservedBlocks)
//	cancel id=I                          Core.Cancel
//	peek tokens=(…) [salt=S]             Core.PeekDevice: the blocks the pool holds (no reuse)
//	hits                                 every cached block's reuse count (offload admission's
//	                                     hits: distinct requests that reused it) and no-offload
//	                                     (beyond max_offload_tokens: the tiers never keep it)
//	tick [by=D]                          advance the clock (default 1ms)
//	step [next=(I:TOK,…)]                Schedule, print the plan, run the fake model, Advance
//	schedule                             Schedule only; print the plan (the step is then lost:
//	                                     its tokens are recomputed by the next schedule)
//	stats                                Core.Stats
//
// The fake model's next token for a request is TOK from next=, or else its last input token
// plus one. After every command the script prints the outputs Ready returned and the block
// counts, and checks the prefix cache's invariants.
type coreScenario struct {
	t      *testing.T
	core   *Core
	cache  *prefix.Cache
	states *fakeStates // hybrid scripts only
	now    time.Time
	vocab  int
	out    strings.Builder
}

// fakeStates is a stateIndex for core scripts: checkpoints by hash (their Pos is all a script
// can see), FIFO within max, and the resumes the core asked for, for the script to print.
type fakeStates struct {
	by      map[prefix.Hash]*model.State
	order   []prefix.Hash
	max     int
	resumes []string
	retired int
}

func (f *fakeStates) has(h prefix.Hash) bool { _, ok := f.by[h]; return ok }
func (f *fakeStates) put(h prefix.Hash, st *model.State) {
	if _, ok := f.by[h]; ok {
		f.retired++
		return
	}
	f.by[h] = st
	f.order = append(f.order, h)
	for len(f.by) > f.max {
		delete(f.by, f.order[0])
		f.order = f.order[1:]
	}
}
func (f *fakeStates) retire(*model.State) { f.retired++ }
func (f *fakeStates) resume(seq uint64, h prefix.Hash) {
	f.resumes = append(f.resumes, fmt.Sprintf("resume %d at %d", seq, f.by[h].Pos))
}

func (s *coreScenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

// tokenList parses key=(1-8,99) into token ids.
func tokenList(t *testing.T, d *datadriven.TestData, key string) []int32 {
	var out []int32
	for _, arg := range d.CmdArgs {
		if arg.Key != key {
			continue
		}
		for _, v := range arg.Vals {
			lo, hi, isRange := strings.Cut(v, "-")
			a, err := strconv.Atoi(strings.TrimSpace(lo))
			if err != nil {
				t.Fatalf("%s: bad token %q", d.Pos, v)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
					t.Fatalf("%s: bad token range %q", d.Pos, v)
				}
			}
			for x := a; x <= b; x++ {
				out = append(out, int32(x))
			}
		}
	}
	return out
}

// pinList parses pin=(8:5m,16:1h) into PinSpecs.
func pinList(t *testing.T, d *datadriven.TestData) []PinSpec {
	var out []PinSpec
	for _, arg := range d.CmdArgs {
		if arg.Key != "pin" {
			continue
		}
		for _, v := range arg.Vals {
			n, ttl, ok := strings.Cut(v, ":")
			k, err1 := strconv.Atoi(n)
			dur, err2 := time.ParseDuration(ttl)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("%s: pin=%q: want TOKENS:TTL", d.Pos, v)
			}
			out = append(out, PinSpec{Tokens: k, TTL: dur})
		}
	}
	return out
}

func argOr[T any](t *testing.T, d *datadriven.TestData, key string, def T) T {
	if !d.HasArg(key) {
		return def
	}
	var v T
	switch p := any(&v).(type) {
	case *time.Duration:
		var str string
		d.ScanArgs(t, key, &str)
		dur, err := time.ParseDuration(str)
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Pos, key, err)
		}
		*p = dur
	default:
		d.ScanArgs(t, key, &v)
	}
	return v
}

func (s *coreScenario) id(d *datadriven.TestData) uint64 {
	var id uint64
	d.ScanArgs(s.t, "id", &id)
	return id
}

func (s *coreScenario) run(d *datadriven.TestData) {
	t := s.t
	if d.Cmd != "new" && s.core == nil {
		t.Fatalf("%s: %s before new", d.Pos, d.Cmd)
	}
	switch d.Cmd {
	case "new":
		cfg := CoreConfig{
			BlockSize:      argOr(t, d, "block-size", 4),
			ContextLength:  argOr(t, d, "ctx", 256),
			MaxBatchTokens: argOr(t, d, "batch", 64),
			MaxRunning:     argOr(t, d, "running", 8),
			PrefixCache:    argOr(t, d, "prefix", true),
			Dedup:          argOr(t, d, "dedup", true),
			EOG:            tokenList(t, d, "eog"),
			PinBudget:      argOr(t, d, "pin-budget", 0),
			PinOwners:      intList(tokenList(t, d, "pin-owners")),
			BlockBytes:     int64(argOr(t, d, "block-bytes", 0)),
		}
		switch p := argOr(t, d, "prefetch", "wait"); p {
		case "wait":
			cfg.Prefetch = PrefetchWait
		case "timeout":
			cfg.Prefetch = PrefetchTimeout
		case "best-effort":
			cfg.Prefetch = PrefetchBestEffort
		case "cost":
			cfg.Prefetch = PrefetchCost
		default:
			t.Fatalf("%s: unknown prefetch policy %q", d.Pos, p)
		}
		cfg.PrefetchMaxWait = argOr(t, d, "prefetch-timeout", 50*time.Millisecond)
		pc, err := prefix.New(prefix.Config{NumBlocks: argOr(t, d, "blocks", 16), BlockSize: cfg.BlockSize, MinHitsToProtect: 1, DisableEvents: true})
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		cfg.CheckpointEvery = argOr(t, d, "checkpoint", 0)
		s.cache, s.core, s.now, s.vocab = pc, newCore(cfg, cacheAdapter{pc}), time.Unix(0, 0), 1000
		s.states = nil
		if cfg.CheckpointEvery > 0 {
			s.states = &fakeStates{by: map[prefix.Hash]*model.State{}, max: argOr(t, d, "checkpoint-budget", 1<<20)}
			s.core.states = s.states
		}
	case "add":
		req := &Request{
			Prompt: tokenList(t, d, "tokens"), MaxTokens: argOr(t, d, "max", 4),
			StopTokens: tokenList(t, d, "stop"), IgnoreEOS: d.HasArg("ignore-eos"),
			CacheSalt: argOr(t, d, "salt", ""),
			Tenant:    argOr(t, d, "tenant", ""), PublicReads: d.HasArg("public-reads"),
			DeviceQuotaBytes: int64(argOr(t, d, "quota", 0)), Owner: uint16(argOr(t, d, "owner", 0)),
		}
		if d.HasArg("allow") {
			req.Sampling.Constraint = &fakeConstraint{allow: argOr(t, d, "allow", 0), left: argOr(t, d, "done-after", 1)}
		}
		req.Pins = pinList(t, d)
		if d.HasArg("max-offload") {
			n := argOr(t, d, "max-offload", 0)
			req.MaxOffloadTokens = &n
		}
		if d.HasArg("max-reuse") {
			n := argOr(t, d, "max-reuse", 0)
			req.MaxReuseTokens = &n
		}
		req.PinStrict = d.HasArg("strict")
		root := prefix.Root(nil, req.CacheSalt)
		if req.PinStrict {
			if err := s.core.ReservePins(s.id(d), req, root); err != nil {
				s.printf("refused: %v\n", err)
				return
			}
		}
		s.core.Add(s.id(d), req, root, 1, s.now)
	case "public":
		root := prefix.Root(nil, argOr(t, d, "salt", ""))
		if err := s.core.MarkPublic(root, prefix.BlockHashes(root, tokenList(t, d, "tokens"), s.core.cfg.BlockSize)); err != nil {
			s.printf("refused: %v\n", err)
		}
		s.printf("public blocks=%d\n", s.core.PublicBlocks())
	case "pins":
		for _, p := range s.core.Pins() {
			s.printf("pin depth=%d block=%d tokens=%d ttl=%v expires=%v\n", p.Depth, p.Block, p.PrefixTokens, p.TTL, p.Expires.Sub(time.Unix(0, 0)))
		}
	case "expire":
		s.printf("expired %d\n", s.core.ExpirePins(s.now))
	case "unpin":
		from := argOr(t, d, "from-depth", 0)
		s.printf("unpinned %d\n", s.core.Unpin(func(p PinInfo) bool { return p.Depth >= from }))
	case "known":
		toks := tokenList(t, d, "tokens")
		ttl, exp := argOr(t, d, "ttl", time.Hour), argOr(t, d, "expires", time.Hour)
		var known []KnownPin
		for _, h := range prefix.BlockHashes(prefix.Root(nil, ""), toks, s.core.cfg.BlockSize) {
			known = append(known, KnownPin{Hash: h, TTL: ttl, Expires: time.Unix(0, 0).Add(exp)})
		}
		s.core.AdoptPins(known)
	case "prefetching":
		s.core.Prefetching(s.id(d))
	case "prefetched":
		p := Prefetched{First: argOr(t, d, "first", 0), Elapsed: argOr(t, d, "elapsed", time.Duration(0))}
		tier := map[string]kvtier.Tier{"host": kvtier.Host, "disk": kvtier.Disk, "remote": kvtier.Remote}[argOr(t, d, "tier", "host")]
		for i := range argOr(t, d, "blocks", 0) {
			if d.HasArg("in-place") {
				p.Blocks = append(p.Blocks, RestoredBlock{Tier: tier, InPlace: true})
				continue
			}
			p.Blocks = append(p.Blocks, RestoredBlock{Tier: tier, Data: []byte{byte(p.First + i)}})
		}
		for _, b := range tokenList(t, d, "state") {
			if i := int(b) - p.First; i >= 0 && i < len(p.Blocks) {
				p.Blocks[i].Checkpoint = &model.State{Pos: (int(b) + 1) * s.core.cfg.BlockSize}
			}
		}
		if d.HasArg("discarded") {
			var v string
			d.ScanArgs(t, "discarded", &v)
			reason, n, _ := strings.Cut(v, ":")
			k, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: discarded=%q: want REASON:K", d.Pos, v)
			}
			p.Discarded = map[string]int{reason: k}
		}
		s.core.Prefetched(s.id(d), p, s.now)
	case "progress":
		s.core.PrefetchProgressed(s.id(d), Progress{Planned: true, Blocks: argOr(t, d, "blocks", 0), Arrived: argOr(t, d, "arrived", 0),
			Restore: argOr(t, d, "restore", time.Duration(0)), Recompute: argOr(t, d, "recompute", time.Duration(0))}, s.now)
	case "reserve":
		if ids := s.core.Reserve(s.id(d), argOr(t, d, "first", 0), argOr(t, d, "n", 0)); ids != nil {
			s.printf("reserved %v\n", ids)
		} else {
			s.printf("no reservation\n")
		}
	case "reserved":
		s.printf("reserved=%d\n", s.core.Stats().ReservedBlocks)
	case "peek":
		have, _ := s.core.PeekDevice(prefix.Root(nil, argOr(t, d, "salt", "")), tokenList(t, d, "tokens"))
		s.printf("peek: %d blocks on the device\n", have)
	case "hits":
		var evs []prefix.Event
		s.cache.Live(func(ev prefix.Event) {
			ev.Tokens = slices.Clone(ev.Tokens)
			evs = append(evs, ev)
		})
		slices.SortFunc(evs, func(a, b prefix.Event) int { return int(a.Block - b.Block) })
		for _, ev := range evs {
			no := ""
			if ev.NoOffload {
				no = " no-offload"
			}
			s.printf("block %d depth %d tokens %v hits %d%s\n", ev.Block, ev.Depth, ev.Tokens, ev.Hits, no)
		}
	case "states":
		var depths []int
		s.cache.Live(func(ev prefix.Event) {
			if s.states.has(ev.Hash) {
				depths = append(depths, int(ev.Depth))
			}
		})
		slices.Sort(depths)
		s.printf("checkpoints at block depths %v (held %d, retired %d)\n", depths, len(s.states.by), s.states.retired)
	case "drop-state":
		hs := prefix.BlockHashes(prefix.Root(nil, ""), tokenList(t, d, "tokens"), s.core.cfg.BlockSize)
		h := hs[argOr(t, d, "block", 0)]
		delete(s.states.by, h)
	case "cancel":
		s.core.Cancel(s.id(d), s.now)
	case "tick":
		s.now = s.now.Add(argOr(t, d, "by", time.Millisecond))
	case "schedule", "step":
		plan := s.core.Schedule(s.now)
		s.printPlan(plan)
		if s.states != nil {
			for _, r := range s.states.resumes {
				s.printf("%s\n", r)
			}
			s.states.resumes = nil
			// The fake model fills every planned checkpoint (its position is all it holds).
			for _, it := range plan.Items {
				for j := range it.Checkpoints {
					it.Checkpoints[j].State = &model.State{Pos: (it.Checkpoints[j].Block + 1) * s.core.cfg.BlockSize}
				}
			}
		}
		if d.Cmd == "step" {
			s.core.Advance(plan, s.fakeForward(d, plan), s.now)
		}
	case "stats":
		st := s.core.Stats()
		s.printf("running=%d waiting=%d dedup-waits=%d preemptions=%d prefetch-stall=%v restored host=%d disk=%d remote=%d\n",
			st.Running, st.Waiting, st.DedupWaits, st.Preemptions, st.PrefetchStall,
			st.Restored[kvtier.Host], st.Restored[kvtier.Disk], st.Restored[kvtier.Remote])
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
}

func (s *coreScenario) printPlan(plan *Plan) {
	if len(plan.Items) == 0 && len(plan.Restores) == 0 {
		s.printf("plan: empty\n")
	}
	for _, r := range plan.Restores {
		s.printf("restore block %d <- prompt block %d\n", r.Block, r.Data[0])
	}
	for _, it := range plan.Items {
		kind := "prefill"
		if len(it.Tokens) == 1 && it.WantLogits && it.Pos > 0 && it.Pos >= s.prompt(it.Seq) {
			kind = "decode"
		}
		logits := ""
		if it.WantLogits {
			logits = " +logits"
		}
		ckpt := ""
		if len(it.Checkpoints) > 0 {
			var bs []int
			for _, cp := range it.Checkpoints {
				bs = append(bs, cp.Block)
			}
			ckpt = fmt.Sprintf(" ckpt=%v", bs)
		}
		s.printf("%s %d: pos %d tokens %d [%d..%d] blocks %v%s%s\n", kind, it.Seq, it.Pos, len(it.Tokens), it.Tokens[0], it.Tokens[len(it.Tokens)-1], it.Blocks, logits, ckpt)
	}
}

func (s *coreScenario) prompt(id uint64) int {
	if q, ok := s.core.seqs[id]; ok {
		return q.prompt
	}
	return 0
}

// fakeForward returns one-hot logits for every item that wants them.
func (s *coreScenario) fakeForward(d *datadriven.TestData, plan *Plan) [][]float32 {
	next := map[uint64]int32{}
	for _, arg := range d.CmdArgs {
		if arg.Key != "next" {
			continue
		}
		for _, v := range arg.Vals {
			id, tok, ok := strings.Cut(v, ":")
			a, err1 := strconv.ParseUint(id, 10, 64)
			b, err2 := strconv.Atoi(tok)
			if !ok || err1 != nil || err2 != nil {
				s.t.Fatalf("%s: next=%q: want ID:TOKEN", d.Pos, v)
			}
			next[a] = int32(b)
		}
	}
	logits := make([][]float32, len(plan.Items))
	for i, it := range plan.Items {
		if !it.WantLogits {
			continue
		}
		tok, ok := next[it.Seq]
		if !ok {
			tok = (it.Tokens[len(it.Tokens)-1] + 1) % int32(s.vocab)
		}
		logits[i] = make([]float32, s.vocab)
		logits[i][tok] = 1
	}
	return logits
}

func (s *coreScenario) printReady() {
	for _, dl := range s.core.Ready() {
		o := dl.Out
		var toks []int32
		for _, tk := range o.Tokens {
			toks = append(toks, tk.ID)
		}
		if len(toks) > 0 {
			s.printf("out %d: tokens %v\n", dl.Seq, toks)
		}
		if o.Done {
			u := o.Usage
			s.printf("out %d: done %s prompt=%d completion=%d device=%d host=%d disk=%d remote=%d computed=%d discarded=%d queue=%vms\n",
				dl.Seq, o.FinishReason, u.PromptTokens, u.CompletionTokens, u.DeviceTokens, u.HostTokens, u.DiskTokens,
				u.RemoteTokens, u.ComputedTokens, u.DiscardedTokens, u.QueueMs)
			if u.CrossTenantTokens > 0 {
				s.printf("out %d: cross-tenant=%d\n", dl.Seq, u.CrossTenantTokens)
			}
			if u.StoppedBy != "" {
				s.printf("out %d: stopped by %s\n", dl.Seq, u.StoppedBy)
			}
			if s.states != nil && (u.DiscardedTokens > 0 || u.Miss != nil && u.Miss.Cause == miss.IncompleteState) {
				var reasons []string
				for r, n := range u.DiscardedBy {
					reasons = append(reasons, fmt.Sprintf("%s:%d", r, n))
				}
				slices.Sort(reasons)
				cause := ""
				if u.Miss != nil {
					cause = string(u.Miss.Cause)
				}
				s.printf("out %d: discarded by %v, miss %s\n", dl.Seq, reasons, cause)
			}
			if len(u.Pins) > 0 {
				s.printf("out %d: pins", dl.Seq)
				for _, p := range u.Pins {
					refused := ""
					if p.Refused {
						refused = " refused"
					}
					if p.Limit != "" {
						refused += " limit=" + p.Limit
					}
					s.printf(" %d/%d@%v+%d%s", p.Pinned, p.Requested, p.TTL, p.Created, refused)
				}
				s.printf("\n")
			}
			if u.CachedTokens()+u.ComputedTokens != u.PromptTokens {
				s.t.Fatalf("usage %+v: cached+computed != prompt", *u)
			}
		}
		if o.Err != nil {
			s.printf("out %d: err %v\n", dl.Seq, o.Err)
		}
	}
}

func TestCoreScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		s := &coreScenario{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			s.out.Reset()
			s.run(d)
			if s.cache != nil {
				s.printReady()
				for _, ev := range s.core.PinEvents() {
					s.printf("pin-event %s depth=%d block=%d ttl=%v expires=%v\n", ev.Kind, ev.Depth, ev.Block, ev.TTL, ev.Expires.Sub(time.Unix(0, 0)))
				}
				if err := s.cache.CheckInvariants(); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				if err := s.core.pins.checkOwners(); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				if s.core.Idle() {
					// Only pins and reservations whose prefetch is still running may outlive
					// their request.
					if st, r, p := s.cache.Stats(), s.core.Stats().ReservedBlocks, s.core.PinnedBlocks(); st.Referenced != r+p {
						t.Fatalf("%s: core idle but %d blocks referenced, %d reserved, %d pinned", d.Pos, st.Referenced, r, p)
					}
				}
				st := s.cache.Stats()
				r, w := len(s.core.running), len(s.core.waiting)
				pinned := ""
				if n := s.core.PinnedBlocks(); n > 0 {
					pinned = fmt.Sprintf(" pinned=%d", n)
				}
				if len(s.core.cfg.PinOwners) > 0 {
					use, share := s.core.PinOwnerUse()
					pinned += " pin-use="
					for o := range use {
						if o > 0 {
							pinned += ","
						}
						pinned += fmt.Sprintf("%d/%d", use[o], share[o])
					}
				}
				s.printf("running=%d waiting=%d | blocks free=%d used=%d cached=%d%s\n", r, w, st.Free, st.Referenced, st.Cached, pinned)
			}
			return s.out.String()
		})
	})
}

// fakeConstraint allows one token until it has accepted left of them, then is done.
type fakeConstraint struct{ allow, left int }

func (c *fakeConstraint) FillMask(mask []uint64) { mask[c.allow/64] |= 1 << (c.allow % 64) }
func (c *fakeConstraint) Accept(tok int32) error {
	if int(tok) != c.allow {
		return fmt.Errorf("fake constraint: token %d, want %d", tok, c.allow)
	}
	c.left--
	return nil
}
func (c *fakeConstraint) Complete() bool { return c.left <= 0 }
func (c *fakeConstraint) Done() bool     { return c.left <= 0 }
