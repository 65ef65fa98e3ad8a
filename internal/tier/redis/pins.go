package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/tier"
)

// maxLocalPins bounds this process's view of the pins (Pins): pins it made are always kept
// and ones discovered by its reads only while the view is smaller than this.
const maxLocalPins = 1 << 16

// pinKey names k's pin record: "{<block key>}:pin". The hash tag is the whole block key, so
// on a cluster the record lives in the block's slot and one script can read both.
func (s *Store) pinKey(k tier.Key) string { return "{" + s.key(k) + "}:pin" }

// refreshScript refreshes the pins of pairs (block key, pin key): for a block with a pin
// record (its value: the pin's TTL in ms) both TTLs become at least the pin's; it returns 1
// per pair refreshed, else 0. Values do not
// pass through it: the blocks are read by MGET (GETs on a cluster) next to it.
var refreshScript = goredis.NewScript(`
local out = {}
for i = 1, #KEYS, 2 do
  local p = tonumber(redis.call('GET', KEYS[i+1]) or '')
  if p and p > 0 then
    redis.call('PEXPIRE', KEYS[i+1], p)
    if redis.call('PTTL', KEYS[i]) < p then redis.call('PEXPIRE', KEYS[i], p) end
    out[#out+1] = 1
  else
    out[#out+1] = 0
  end
end
return out
`)

// touchScript is refreshScript for a read that also refreshes unpinned blocks (Config's
// NoReadRefresh false): over pairs (block key, pin key), a pinned block is refreshed as
// refreshScript does, and an unpinned one that exists with a TTL under ARGV[1] ms gets that
// TTL (a read never shortens a TTL, and never touches a block with no TTL). It returns 1 per
// pair pinned, else 0. A pin is never shortened by it: an unpinned block's TTL is only set
// when its pair has no pin record.
var touchScript = goredis.NewScript(`
local ttl = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS, 2 do
  local p = tonumber(redis.call('GET', KEYS[i+1]) or '')
  if p and p > 0 then
    redis.call('PEXPIRE', KEYS[i+1], p)
    if redis.call('PTTL', KEYS[i]) < p then redis.call('PEXPIRE', KEYS[i], p) end
    out[#out+1] = 1
  else
    local t = redis.call('PTTL', KEYS[i])
    if t >= 0 and t < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
    out[#out+1] = 0
  end
end
return out
`)

// readScript is the script a read runs in its pipeline over the pairs it refreshes, and its
// arguments: touchScript over every key read, or refreshScript over the pins known.
func (s *Store) readScript() (*goredis.Script, []any) {
	if s.cfg.NoReadRefresh {
		return refreshScript, nil
	}
	return touchScript, []any{ms(s.cfg.TTL)}
}

// pinScript pins (ARGV[1] > 0 ms) or unpins the blocks of pairs (block key, pin key) that
// exist: a pin writes the record with that TTL and extends the block's TTL to at least it;
// an unpin removes the record and brings the block's TTL back to at most the default
// (ARGV[2] ms). It returns 1 per pair whose block exists, else 0.
var pinScript = goredis.NewScript(`
local ttl, def = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if ttl > 0 then
      redis.call('SET', KEYS[i+1], ttl, 'PX', ttl)
      if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
    else
      redis.call('DEL', KEYS[i+1])
      if redis.call('PTTL', KEYS[i]) > def then redis.call('PEXPIRE', KEYS[i], def) end
    end
    out[#out+1] = 1
  else
    out[#out+1] = 0
  end
end
return out
`)

// ms is d in whole milliseconds, at least 1 (Redis TTLs are ms).
func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// runPairs runs sc over the pairs (block key, pin key) of keys and returns its flat reply
// for each key: one script call on a single server; on a cluster one call per pair, in a
// pipeline (a pair shares a slot, the batch does not). A script the server has not cached
// is sent whole once (EVALSHA, then EVAL on NOSCRIPT).
func (s *Store) runPairs(ctx context.Context, sc *goredis.Script, keys []tier.Key, args ...any) ([][]any, error) {
	out := make([][]any, len(keys))
	if !s.cluster {
		names := make([]string, 0, 2*len(keys))
		for _, k := range keys {
			names = append(names, s.key(k), s.pinKey(k))
		}
		res, err := sc.Run(ctx, s.client, names, args...).Slice()
		if err != nil {
			return nil, err
		}
		if len(res)%len(keys) != 0 {
			return nil, fmt.Errorf("script reply of %d values for %d keys", len(res), len(keys))
		}
		w := len(res) / len(keys)
		for i := range out {
			out[i] = res[i*w : (i+1)*w]
		}
		return out, nil
	}
	// On a cluster: one call per slot group, the pairs of its keys (see perNode); keys of
	// a master that failed get a nil reply.
	groups := s.groupBySlot(keys)
	cmds := make([]*goredis.Cmd, len(groups))
	run := func(eval bool, todo []bool) ([]bool, error) {
		return s.perNode(ctx, keys, groups, func(p goredis.Pipeliner, gi int) []goredis.Cmder {
			if !todo[gi] {
				return nil
			}
			names := make([]string, 0, 2*len(groups[gi].idx))
			for _, i := range groups[gi].idx {
				names = append(names, s.key(keys[i]), s.pinKey(keys[i]))
			}
			if eval {
				cmds[gi] = sc.Eval(ctx, p, names, args...)
			} else {
				cmds[gi] = sc.EvalSha(ctx, p, names, args...)
			}
			return []goredis.Cmder{cmds[gi]}
		})
	}
	all := make([]bool, len(groups))
	for gi := range all {
		all[gi] = true
	}
	answered, err := run(false, all)
	if err != nil {
		return nil, err
	}
	again := make([]bool, len(groups)) // NOSCRIPT: a server that has not cached the script
	retry := false
	for gi, c := range cmds {
		if c != nil && goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again[gi], retry = true, true
		}
	}
	if retry {
		if _, err := run(true, again); err != nil {
			return nil, err
		}
	}
	for gi, g := range groups {
		if !answered[gi] {
			continue
		}
		res, err := cmds[gi].Slice()
		if err != nil || len(res)%len(g.idx) != 0 {
			continue // no answer for this slot's keys
		}
		w := len(res) / len(g.idx)
		for j, i := range g.idx {
			out[i] = res[j*w : (j+1)*w]
		}
	}
	return out, nil
}

// Pin implements tier.Pinner: the blocks Redis holds get a pin record with ttl (ttl <= 0:
// removed) and a TTL of at least ttl; see the package doc.
func (s *Store) Pin(ctx context.Context, keys []tier.Key, ttl time.Duration) ([]bool, error) {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, ctx.Err()
	}
	pinMS := int64(0)
	if ttl > 0 {
		pinMS = ms(ttl)
	}
	var res [][]any
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.runPairs(ctx, pinScript, keys, pinMS, ms(s.cfg.TTL))
		return err
	})
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range res {
		var n int64
		if len(r) > 0 {
			n, _ = r[0].(int64)
		}
		out[i] = n == 1
		switch {
		case !out[i] || ttl <= 0:
			delete(s.mu.pins, keys[i])
		default:
			s.mu.pins[keys[i]] = tier.PinInfo{Key: keys[i], TTL: ttl, Expires: now.Add(ttl)}
		}
	}
	return out, nil
}

// notePinsLocked updates the local view from a Get's replies: a block found with a pin
// record is pinned until now + its TTL; one found without, or missed, is not pinned.
// REQUIRES: s.mu held.
func (s *Store) notePinsLocked(keys []tier.Key, pinTTL []time.Duration, found []bool, now time.Time) {
	for i, k := range keys {
		if !found[i] || pinTTL[i] <= 0 {
			delete(s.mu.pins, k)
			continue
		}
		if _, ok := s.mu.pins[k]; !ok && len(s.mu.pins) >= maxLocalPins {
			s.sweepLocked(now)
			if len(s.mu.pins) >= maxLocalPins {
				continue // discovered, and no room in the view: Redis still refreshes it
			}
		}
		s.mu.pins[k] = tier.PinInfo{Key: k, TTL: pinTTL[i], Expires: now.Add(pinTTL[i])}
	}
}

// sweepLocked drops the pins of the local view that have expired at now.
// REQUIRES: s.mu held.
func (s *Store) sweepLocked(now time.Time) {
	for k, p := range s.mu.pins {
		if !p.Expires.After(now) {
			delete(s.mu.pins, k)
		}
	}
}

// Pins implements tier.Pinner with this process's view: the pins it made (Put with PinTTL,
// Pin) and the ones its Gets found, each expiring by its own clock at its last use seen
// here + TTL. Pins made by other replicas that this one has not read are not listed: Redis
// is shared, and listing all would be a SCAN of the keyspace. The view is exact for a
// single replica and a lower bound for many.
func (s *Store) Pins() []tier.PinInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.cfg.Now())
	out := make([]tier.PinInfo, 0, len(s.mu.pins))
	for _, p := range s.mu.pins {
		out = append(out, p)
	}
	return out
}

// read reads keys' blocks and pin records in one round trip: on a single server one MGET of
// both, on a cluster one MGET per slot (readCluster); the pins this process knows (known) are
// refreshed in the same pipeline. It returns the values and the pin TTLs found (0: no record).
func (s *Store) read(ctx context.Context, keys []tier.Key, known []tier.Key) ([][]byte, []time.Duration, error) {
	if s.cluster {
		return s.readCluster(ctx, keys, known)
	}
	vals := make([][]byte, len(keys))
	pins := make([]time.Duration, len(keys))
	sc, args := s.readScript()
	var refresh *goredis.Cmd
	var fromMGet *goredis.SliceCmd
	names := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		names = append(names, s.key(k))
	}
	for i := range keys {
		names = append(names, "{"+names[i]+"}:pin") // pinKey
	}
	var err error
	if len(known) == 0 {
		fromMGet = s.client.MGet(ctx, names...) // nothing to refresh in this round trip
		err = fromMGet.Err()
	} else {
		_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			fromMGet = p.MGet(ctx, names...)
			pairs := make([]string, 0, 2*len(known))
			for _, k := range known {
				pairs = append(pairs, s.key(k), s.pinKey(k))
			}
			refresh = sc.EvalSha(ctx, p, pairs, args...)
			return nil
		})
	}
	// The pipeline's error is its first failed command's. Only the MGET's fails the read: the
	// refresh is best effort (a server that refuses it, such as a read-only replica answering
	// READONLY, still serves the read; a dead connection fails the MGET too).
	_ = err
	noScript := refresh != nil && goredis.HasErrorPrefix(refresh.Err(), "NOSCRIPT")
	res, err := fromMGet.Result()
	if err != nil {
		return nil, nil, err
	}
	for i := range keys {
		if str, ok := res[i].(string); ok {
			vals[i] = []byte(str)
		}
		pins[i] = pinValue(res[len(keys)+i])
	}
	if noScript { // a restarted server: send the script whole (EVAL caches it); best effort
		s.runPairs(ctx, sc, known, args...)
	}
	return vals, pins, nil
}

// readCluster is read on a cluster: the keys grouped by slot, one MGET per slot of its blocks
// and their pin records, and per slot one refresh of the pins known in it, all in one
// pipeline that go-redis splits per master. The keys of a master that failed, or whose
// breaker is open, are misses (perNode); the batch fails only when no master answered.
func (s *Store) readCluster(ctx context.Context, keys []tier.Key, known []tier.Key) ([][]byte, []time.Duration, error) {
	vals := make([][]byte, len(keys))
	pins := make([]time.Duration, len(keys))
	groups := s.groupBySlot(keys)
	sc, args := s.readScript()
	knownIn := make([][]tier.Key, len(groups)) // the known pins of each group
	if len(known) > 0 {
		isKnown := make(map[tier.Key]bool, len(known))
		for _, k := range known {
			isKnown[k] = true
		}
		for gi, g := range groups {
			for _, i := range g.idx {
				if isKnown[keys[i]] {
					knownIn[gi] = append(knownIn[gi], keys[i])
				}
			}
		}
	}
	mgets := make([]*goredis.SliceCmd, len(groups))
	refresh := make([]*goredis.Cmd, len(groups))
	answered, err := s.perNode(ctx, keys, groups, func(p goredis.Pipeliner, gi int) []goredis.Cmder {
		names := make([]string, 0, 2*len(groups[gi].idx))
		for _, i := range groups[gi].idx {
			names = append(names, s.key(keys[i]), s.pinKey(keys[i]))
		}
		mgets[gi] = p.MGet(ctx, names...)
		if len(knownIn[gi]) == 0 {
			return []goredis.Cmder{mgets[gi]}
		}
		pairs := make([]string, 0, 2*len(knownIn[gi]))
		for _, k := range knownIn[gi] {
			pairs = append(pairs, s.key(k), s.pinKey(k))
		}
		refresh[gi] = sc.EvalSha(ctx, p, pairs, args...)
		return []goredis.Cmder{mgets[gi]} // the refresh is queued too, but best effort: not judged
	})
	if err != nil {
		return nil, nil, err
	}
	var again []tier.Key // NOSCRIPT: a restarted master; send the script whole
	for gi, g := range groups {
		if !answered[gi] {
			continue
		}
		res, err := mgets[gi].Result()
		if err != nil || len(res) != 2*len(g.idx) {
			continue
		}
		for j, i := range g.idx {
			if str, ok := res[2*j].(string); ok {
				vals[i] = []byte(str)
			}
			pins[i] = pinValue(res[2*j+1])
		}
		if refresh[gi] != nil && goredis.HasErrorPrefix(refresh[gi].Err(), "NOSCRIPT") {
			again = append(again, knownIn[gi]...)
		}
	}
	if len(again) > 0 { // best effort, as the refresh in the pipeline
		s.runPairs(ctx, sc, again, args...)
	}
	return vals, pins, nil
}

// pinValue reads a pin record's value (the TTL in ms); 0 for none or a malformed one.
func pinValue(v any) time.Duration {
	str, ok := v.(string)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(str, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}
