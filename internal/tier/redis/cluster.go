package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/tier"
)

// slotGroup is the keys of one batch that hash to one cluster slot: a block key and its pin
// record share a slot, so one command per group (an MGET, a DEL, a script) covers them all.
type slotGroup struct {
	slot int
	idx  []int // indexes into the batch, ascending
}

// groupBySlot groups the batch's block keys by slot, in the order of their first key.
func (s *Store) groupBySlot(keys []tier.Key) []slotGroup {
	at := make(map[int]int, len(keys)) // slot → index in out
	var out []slotGroup
	for i, k := range keys {
		slot := keySlot(s.key(k))
		g, ok := at[slot]
		if !ok {
			g = len(out)
			at[slot] = g
			out = append(out, slotGroup{slot: slot})
		}
		out[g].idx = append(out[g].idx, i)
	}
	return out
}

// nodeBreaker returns the breaker of the cluster master at addr, made on first use.
func (s *Store) nodeBreaker(addr string) *breaker {
	s.nodes.Lock()
	defer s.nodes.Unlock()
	b, ok := s.nodes.m[addr]
	if !ok {
		b = &breaker{failures: s.cfg.BreakerFailures, cooldown: s.cfg.BreakerCooldown, now: s.breaker.now}
		s.nodes.m[addr] = b
	}
	return b
}

// cmdOK reports whether a command's reply is an answer: a success, a nil reply (a missing
// key), or NOSCRIPT (the script is sent whole next; see runPairs).
func cmdOK(err error) bool {
	return err == nil || errors.Is(err, goredis.Nil) || goredis.HasErrorPrefix(err, "NOSCRIPT")
}

// writeOK is cmdOK for Put's commands: a write refused by a full master (maxmemory with
// noeviction) is an answer too, from a master that is up; Put turns each refused item into
// tier.ErrNoSpace.
func writeOK(err error) bool { return cmdOK(err) || isOOM(err) }

// isOOM reports a write refused by a full server.
func isOOM(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "OOM") }

// perNode runs a batch on a cluster with a breaker per master. add queues the commands of
// group gi. The groups whose master's breaker is open are not sent; the others go in one
// pipeline, which go-redis splits per node (following MOVED and ASK). A group is answered
// when all its commands are (cmdOK); each master sent to gets its breaker's verdict: all its
// groups answered, or not (a caller's cancellation is no verdict). It returns which groups
// were answered, and an error only when none was: the batch failed as a whole (ErrUnavailable
// when every master's breaker was open). Keys of unanswered groups are counted as skipped.
//
// The master of a group is the one go-redis's slot map names now; a group that a MOVED sends
// elsewhere still counts for the master named first. A verdict is a call's, not a key's.
func (s *Store) perNode(ctx context.Context, keys []tier.Key, groups []slotGroup, add func(p goredis.Pipeliner, gi int) []goredis.Cmder) ([]bool, error) {
	return s.perNodeOK(ctx, keys, groups, cmdOK, add)
}

// perNodeOK is perNode judging each command's reply with ok.
func (s *Store) perNodeOK(ctx context.Context, keys []tier.Key, groups []slotGroup, ok func(error) bool, add func(p goredis.Pipeliner, gi int) []goredis.Cmder) ([]bool, error) {
	cc := s.client.(*goredis.ClusterClient)
	answered := make([]bool, len(groups))
	node := make([]*breaker, len(groups))
	allowed := map[*breaker]bool{}
	sent := 0
	for gi, g := range groups {
		c, err := cc.MasterForKey(ctx, s.key(keys[g.idx[0]]))
		if err != nil {
			return nil, err // no slot map: the cluster is unreachable
		}
		b := s.nodeBreaker(c.Options().Addr)
		ok, seen := allowed[b]
		if !seen {
			ok = b.allow() == nil
			allowed[b] = ok
		}
		if ok {
			node[gi] = b
			sent++
		}
	}
	cmds := make([][]goredis.Cmder, len(groups))
	if sent > 0 {
		// The pipeline's own error is its first command's; each command is judged below.
		s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for gi := range groups {
				if node[gi] != nil {
					cmds[gi] = add(p, gi)
				}
			}
			return nil
		})
	}
	verdict := map[*breaker]bool{}
	canceled := false
	var firstErr error
	for gi := range groups {
		if node[gi] == nil {
			continue
		}
		answer := true
		for _, c := range cmds[gi] {
			if err := c.Err(); !ok(err) {
				answer = false
				canceled = canceled || errors.Is(err, context.Canceled)
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		answered[gi] = answer
		if v, seen := verdict[node[gi]]; !seen || v {
			verdict[node[gi]] = answer
		}
	}
	for b, v := range verdict {
		if canceled && !v {
			b.release()
		} else {
			b.done(v)
		}
	}
	skipped, any := 0, false
	for gi, g := range groups {
		if answered[gi] {
			any = true
		} else {
			skipped += len(g.idx)
		}
	}
	if skipped > 0 {
		s.mu.Lock()
		s.mu.skipped += uint64(skipped)
		s.mu.Unlock()
	}
	switch {
	case any:
		return answered, nil
	case firstErr != nil:
		return nil, firstErr
	}
	return nil, fmt.Errorf("%w: the breaker of every cluster master of the batch is open", tier.ErrUnavailable)
}

// unanswered returns an error per key of the groups not answered, for a Put or a Delete on a
// cluster: nil when all were.
func unanswered(groups []slotGroup, answered []bool, what string) error {
	var errs []error
	for gi, g := range groups {
		if !answered[gi] {
			for range g.idx {
				errs = append(errs, fmt.Errorf("redis: %w: %s not done, its cluster master failed or its breaker is open", tier.ErrUnavailable, what))
			}
		}
	}
	return errors.Join(errs...)
}
