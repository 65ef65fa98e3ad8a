package kvevents

// protocol is a Subscriber's side of the epoch/sequence protocol, with no I/O: which epoch
// and sequence number its Sink holds, and whether it must load a snapshot before it may
// stream again. The Subscriber feeds it what the wire says and does what it answers; the
// scripts in testdata/protocol.txt step it alone.
//
// Invariant: when needSnapshot is false, the Sink holds the snapshot of epoch plus every
// event of that epoch up to seq, without a gap.
type protocol struct {
	epoch, seq   uint64
	needSnapshot bool
}

// verdict is what the Subscriber does with a line.
type verdict uint8

const (
	accept verdict = iota // in order: apply it (an event) or keep reading
	resync                // the stream cannot continue the Sink's state: load a snapshot
	gap                   // events were lost (counted in SubscriberStats.Gaps): load a snapshot
)

func (v verdict) String() string {
	return [...]string{accept: "accept", resync: "resync", gap: "gap"}[v]
}

func newProtocol() protocol { return protocol{needSnapshot: true} }

// snapshot records that the Sink was reset to a snapshot of epoch after event seq. It
// reports whether the replica restarted (a new epoch after a known one).
func (p *protocol) snapshot(epoch, seq uint64) (restarted bool) {
	restarted = p.epoch != 0 && epoch != p.epoch
	p.epoch, p.seq, p.needSnapshot = epoch, seq, false
	return restarted
}

// hello checks a stream's opening epoch: another epoch means the replica restarted since
// the snapshot, and its sequence numbers no longer continue ours.
func (p *protocol) hello(epoch uint64) verdict {
	if epoch != p.epoch {
		return p.fail(resync)
	}
	return accept
}

// event checks an event's sequence number: only seq+1 continues the Sink's state.
func (p *protocol) event(seq uint64) verdict {
	if seq != p.seq+1 {
		return p.fail(gap)
	}
	p.seq = seq
	return accept
}

// heartbeat checks the publisher's latest sequence number. Every event up to it was written
// before the heartbeat, so a larger one means we lost events; a smaller one means the
// publisher is behind us, impossible unless epochs collide: resync anyway.
func (p *protocol) heartbeat(seq uint64) verdict {
	if seq != p.seq {
		return p.fail(gap)
	}
	return accept
}

// resyncAsked handles the publisher's "resync" line (we asked for events its ring no longer
// holds).
func (p *protocol) resyncAsked() verdict { return p.fail(resync) }

// unsupported forgets the replica: it serves no stream, so a later one starts afresh (and is
// not counted as a restart).
func (p *protocol) unsupported() { p.epoch, p.seq, p.needSnapshot = 0, 0, true }

func (p *protocol) fail(v verdict) verdict {
	p.needSnapshot = true
	return v
}
