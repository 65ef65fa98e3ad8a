package main

import (
	"encoding/binary"
	"flag"
	"log/slog"
	"sync"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/vllmevents"
)

// addKVZMQFlags registers serve's vLLM-format event flags (internal/vllmevents).
func addKVZMQFlags(fs *flag.FlagSet, c *vllmevents.PublisherConfig) {
	fs.StringVar(&c.Endpoint, "kv-events-zmq", "", "also publish block events in vLLM's ZeroMQ wire format (llm-d, Dynamo, route --kv-events-listen) on this endpoint: bound when it has *, :: or 0.0.0.0 or is ipc:// or inproc://, else connected, as vLLM does (e.g. tcp://*:5557, or tcp://router:5557)")
	fs.StringVar(&c.Replay, "kv-events-replay", "", "with --kv-events-zmq: bind a replay socket here (a DEALER sends [\"\", start_seq] and gets the buffered batches, then seq -1), as vLLM's replay_endpoint")
	fs.StringVar(&c.Topic, "kv-events-topic", "", "with --kv-events-zmq: the topic frame of every message (llm-d's convention: kv@<host:port>@<model>; route --kv-events-listen needs the host:port of this replica's --backend URL there)")
}

// zmqPublisher turns the replica's block events into vLLM's (vllmevents.Publisher). A block
// hash is the first 8 bytes of our chain hash, big-endian. The offload tiers' events carry no
// tokens, so the device's Stored events are remembered (tokens and parent, a bounded table):
// a lower tier's Stored is published with them, and skipped for a block not in the table (one
// restored from a tier written by an earlier process).
type zmqPublisher struct {
	pub       *vllmevents.Publisher
	blockSize int

	mu     sync.Mutex
	blocks map[prefix.Hash]zmqBlock
}

type zmqBlock struct {
	tokens []int32
	parent prefix.Hash
	root   bool
}

// zmqKnownBlocks bounds the table of block tokens kept for the tiers' events (about 100 bytes
// a block of 16 tokens: 6 MiB).
const zmqKnownBlocks = 1 << 16

// newZMQPublisher returns nil when c has no endpoint (every method is a no-op on nil).
func newZMQPublisher(c vllmevents.PublisherConfig, blockSize int, logger *slog.Logger) (*zmqPublisher, error) {
	if c.Endpoint == "" {
		return nil, nil
	}
	c.Logger = logger
	p, err := vllmevents.NewPublisher(c)
	if err != nil {
		return nil, err
	}
	return &zmqPublisher{pub: p, blockSize: blockSize, blocks: map[prefix.Hash]zmqBlock{}}, nil
}

func wireHash(h prefix.Hash) uint64 { return binary.BigEndian.Uint64(h[:8]) }

// device publishes the working pool's events as one batch: consecutive stored blocks of one
// chain in one BlockStored, as vLLM stores a request's new blocks.
func (z *zmqPublisher) device(evs []prefix.Event) {
	if z == nil {
		return
	}
	var out []vllmevents.Event
	medium := vllmevents.MediumOf(kvtier.Device)
	z.mu.Lock()
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case prefix.Stored:
			z.rememberLocked(e.Hash, zmqBlock{tokens: append([]int32(nil), e.Tokens...), parent: e.Parent, root: e.Depth == 0})
			if n := len(out); n > 0 && out[n-1].Type == vllmevents.TypeStored && i > 0 && evs[i-1].Kind == prefix.Stored && evs[i-1].Hash == e.Parent {
				out[n-1].BlockHashes = append(out[n-1].BlockHashes, wireHash(e.Hash))
				out[n-1].TokenIDs = append(out[n-1].TokenIDs, e.Tokens...)
				continue
			}
			out = append(out, z.stored(e.Hash, e.Parent, e.Depth == 0, e.Tokens, medium))
		case prefix.Evicted, prefix.Removed:
			out = append(out, vllmevents.Event{Type: vllmevents.TypeRemoved, BlockHashes: []uint64{wireHash(e.Hash)}, Medium: medium})
		case prefix.Cleared:
			out = append(out, vllmevents.Event{Type: vllmevents.TypeCleared})
		}
	}
	z.mu.Unlock()
	z.pub.Publish(out)
}

func (z *zmqPublisher) stored(h, parent prefix.Hash, root bool, tokens []int32, medium string) vllmevents.Event {
	ev := vllmevents.Event{Type: vllmevents.TypeStored, BlockHashes: []uint64{wireHash(h)}, TokenIDs: append([]int32(nil), tokens...),
		BlockSize: z.blockSize, Medium: medium}
	if !root {
		ev.HasParent, ev.Parent = true, wireHash(parent)
	}
	return ev
}

// rememberLocked keeps b for the tiers' events, dropping an eighth of the table when full.
func (z *zmqPublisher) rememberLocked(h prefix.Hash, b zmqBlock) {
	if len(z.blocks) >= zmqKnownBlocks {
		drop := zmqKnownBlocks / 8
		for k := range z.blocks {
			if drop == 0 {
				break
			}
			delete(z.blocks, k)
			drop--
		}
	}
	z.blocks[h] = b
}

// tee returns a publish function for the offload tiers that also publishes their events here.
func (z *zmqPublisher) tee(next func(...kvevents.Event)) func(...kvevents.Event) {
	if z == nil {
		return next
	}
	return func(evs ...kvevents.Event) {
		next(evs...)
		var out []vllmevents.Event
		z.mu.Lock()
		for _, e := range evs {
			medium := vllmevents.MediumOf(e.Tier)
			switch e.Kind {
			case kvevents.Stored:
				if b, ok := z.blocks[e.Hash]; ok && len(b.tokens) == z.blockSize {
					out = append(out, z.stored(e.Hash, b.parent, b.root, b.tokens, medium))
				}
			case kvevents.Removed:
				out = append(out, vllmevents.Event{Type: vllmevents.TypeRemoved, BlockHashes: []uint64{wireHash(e.Hash)}, Medium: medium})
			case kvevents.Cleared:
				// vLLM's AllBlocksCleared names no medium: consumers drop every tier, which
				// under-reports rather than leaves blocks the tier no longer holds.
				out = append(out, vllmevents.Event{Type: vllmevents.TypeCleared})
			}
		}
		z.mu.Unlock()
		z.pub.Publish(out)
	}
}

// Close stops publishing.
func (z *zmqPublisher) Close() {
	if z != nil {
		z.pub.Close()
	}
}
