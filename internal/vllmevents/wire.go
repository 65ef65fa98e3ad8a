package vllmevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"stockpot/internal/kvtier"
)

// Event type tags, as vLLM's tagged union names them.
const (
	TypeStored  = "BlockStored"
	TypeRemoved = "BlockRemoved"
	TypeCleared = "AllBlocksCleared"
)

// Event is one KV-cache event of vLLM's union (BlockStored, BlockRemoved, AllBlocksCleared).
// Fields a type does not have are zero.
type Event struct {
	Type        string
	BlockHashes []uint64 // an engine's hashes: opaque keys (a signed or bytes hash is folded to 64 bits)
	HasParent   bool     // BlockStored: parent_block_hash is not null
	Parent      uint64   // BlockStored: the hash of the block before BlockHashes[0]
	TokenIDs    []int32  // BlockStored: len(BlockHashes)×BlockSize tokens, block after block
	BlockSize   int      // BlockStored
	HasLoraID   bool
	LoraID      int64
	Medium      string // "" is null (vLLM: the device)
	LoraName    string // "" is null
}

// Batch is vLLM's EventBatch: [ts, events, data_parallel_rank].
type Batch struct {
	TS        float64
	Events    []Event
	HasDPRank bool
	DPRank    int64
}

// Bounds on what DecodeBatch accepts (a payload past them is garbage).
const (
	MaxPayloadBytes = 16 << 20
	MaxEvents       = 1 << 16
	MaxBlocks       = 1 << 16 // block hashes in one event
	MaxTokens       = 1 << 22 // token ids in one event
	MaxBlockSize    = 1 << 16
	maxDepth        = 16 // nesting skipped inside an unknown field
)

// Mediums Stockpot publishes for its tiers (MediumOf). The decoder also reads vLLM's, SGLang's
// and LMCache's spellings (TierOf).
var mediums = [kvtier.Count]string{kvtier.Device: "GPU", kvtier.Host: "CPU", kvtier.Disk: "DISK", kvtier.Remote: "EXTERNAL"}

// MediumOf is the medium string Stockpot publishes for tier t.
func MediumOf(t kvtier.Tier) string {
	if int(t) < len(mediums) {
		return mediums[t]
	}
	return ""
}

// TierOf maps a medium to a tier: null, GPU, CUDA, HBM or DEVICE is the device; CPU,
// CPU_PINNED or HOST the host; DISK, SSD, NVME or LOCALDISK the disk; EXTERNAL or REMOTE the
// remote tier (any case). ok=false for anything else.
func TierOf(medium string) (kvtier.Tier, bool) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "CUDA", "HBM", "DEVICE":
		return kvtier.Device, true
	case "CPU", "CPU_PINNED", "HOST", "LOCALCPU":
		return kvtier.Host, true
	case "DISK", "SSD", "NVME", "LOCALDISK":
		return kvtier.Disk, true
	case "EXTERNAL", "REMOTE":
		return kvtier.Remote, true
	}
	return 0, false
}

// AppendBatch appends b's msgpack encoding in vLLM 0.26's shape: the batch an array
// [ts, events, data_parallel_rank], each event a map tagged by "type" with every field of its
// dataclass (null where unset).
func AppendBatch(dst []byte, b *Batch) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(dst)
	enc := msgpack.NewEncoder(&buf)
	check := func(errs ...error) error { return errors.Join(errs...) }
	if err := check(enc.EncodeArrayLen(3), enc.EncodeFloat64(b.TS), enc.EncodeArrayLen(len(b.Events))); err != nil {
		return nil, err
	}
	nullable := func(set bool, v func() error) error {
		if !set {
			return enc.EncodeNil()
		}
		return v()
	}
	str := func(s string) error { return nullable(s != "", func() error { return enc.EncodeString(s) }) }
	hashes := func(hs []uint64) error {
		err := enc.EncodeArrayLen(len(hs))
		for _, h := range hs {
			err = errors.Join(err, enc.EncodeUint64(h))
		}
		return err
	}
	for i := range b.Events {
		ev := &b.Events[i]
		var err error
		switch ev.Type {
		case TypeStored:
			err = check(enc.EncodeMapLen(8), enc.EncodeString("type"), enc.EncodeString(TypeStored),
				enc.EncodeString("block_hashes"), hashes(ev.BlockHashes),
				enc.EncodeString("parent_block_hash"), nullable(ev.HasParent, func() error { return enc.EncodeUint64(ev.Parent) }),
				enc.EncodeString("token_ids"), enc.EncodeArrayLen(len(ev.TokenIDs)))
			for _, t := range ev.TokenIDs {
				err = errors.Join(err, enc.EncodeInt64(int64(t)))
			}
			err = check(err, enc.EncodeString("block_size"), enc.EncodeInt64(int64(ev.BlockSize)),
				enc.EncodeString("lora_id"), nullable(ev.HasLoraID, func() error { return enc.EncodeInt64(ev.LoraID) }),
				enc.EncodeString("medium"), str(ev.Medium),
				enc.EncodeString("lora_name"), str(ev.LoraName))
		case TypeRemoved:
			err = check(enc.EncodeMapLen(3), enc.EncodeString("type"), enc.EncodeString(TypeRemoved),
				enc.EncodeString("block_hashes"), hashes(ev.BlockHashes), enc.EncodeString("medium"), str(ev.Medium))
		case TypeCleared:
			err = check(enc.EncodeMapLen(1), enc.EncodeString("type"), enc.EncodeString(TypeCleared))
		default:
			err = fmt.Errorf("vllmevents: cannot encode event type %q", ev.Type)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := nullable(b.HasDPRank, func() error { return enc.EncodeInt64(b.DPRank) }); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ErrUnknownType marks an event whose type tag is none of the three; DecodeBatch skips such
// events and counts them rather than failing the batch.
var ErrUnknownType = errors.New("vllmevents: unknown event type")

// DecodeBatch decodes one EventBatch payload. It reads every shape a consumer meets: events as
// maps tagged by "type" (vLLM 0.26 and later), as positional arrays whose first element is the
// tag (vLLM before 0.26, and SGLang, whose hashes may be negative), with or without the trailing
// fields added over time (medium, lora_name) and with fields past those ignored. A block hash
// may be an unsigned or signed integer or bytes (folded to 64 bits by FNV-1a): the consumer
// only compares hashes with each other. Events of an unknown type are skipped and counted in
// unknown. Anything else that does not fit (bad msgpack, a wrong field type, token_ids that are
// not len(block_hashes)×block_size, a bound exceeded, trailing bytes) is an error, and nothing
// of the batch may be applied.
func DecodeBatch(payload []byte) (b Batch, unknown int, err error) {
	if len(payload) > MaxPayloadBytes {
		return b, 0, fmt.Errorf("vllmevents: payload of %d bytes (max %d)", len(payload), MaxPayloadBytes)
	}
	r := bytes.NewReader(payload)
	d := msgpack.NewDecoder(r)
	n, err := d.DecodeArrayLen()
	if err != nil {
		return b, 0, fmt.Errorf("vllmevents: batch: %w", err)
	}
	if n < 2 || n > 8 {
		return b, 0, fmt.Errorf("vllmevents: batch has %d fields, want [ts, events, dp_rank]", n)
	}
	if b.TS, err = d.DecodeFloat64(); err != nil {
		return b, 0, fmt.Errorf("vllmevents: ts: %w", err)
	}
	ne, err := arrayLen(d, MaxEvents, "events")
	if err != nil {
		return b, 0, err
	}
	b.Events = make([]Event, 0, min(ne, 64))
	for range ne {
		ev, err := decodeEvent(d)
		if errors.Is(err, ErrUnknownType) {
			unknown++
			continue
		}
		if err != nil {
			return Batch{}, 0, err
		}
		b.Events = append(b.Events, ev)
	}
	if n >= 3 {
		if b.HasDPRank, err = nullableInt(d, &b.DPRank); err != nil {
			return Batch{}, 0, fmt.Errorf("vllmevents: data_parallel_rank: %w", err)
		}
	}
	for i := 3; i < n; i++ {
		if err := skip(d, 0); err != nil {
			return Batch{}, 0, err
		}
	}
	if r.Len() != 0 {
		return Batch{}, 0, fmt.Errorf("vllmevents: %d bytes after the batch", r.Len())
	}
	return b, unknown, nil
}

func arrayLen(d *msgpack.Decoder, limit int, what string) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("vllmevents: %s: %w", what, err)
	}
	if n < 0 || n > limit {
		return 0, fmt.Errorf("vllmevents: %s: %d entries (want 0..%d)", what, n, limit)
	}
	return n, nil
}

// fields names the positional fields of each type, in the dataclass's order.
var fields = map[string][]string{
	TypeStored:  {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
	TypeRemoved: {"block_hashes", "medium"},
	TypeCleared: {},
}

// required are the fields an event of the type must carry (the rest default to null).
var required = map[string]int{TypeStored: 4, TypeRemoved: 1, TypeCleared: 0}

func decodeEvent(d *msgpack.Decoder) (Event, error) {
	var ev Event
	c, err := d.PeekCode()
	if err != nil {
		return ev, fmt.Errorf("vllmevents: event: %w", err)
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil || n < 0 || n > 64 {
			return ev, fmt.Errorf("vllmevents: event map: %d keys, %v", n, err)
		}
		seen := map[string]bool{}
		var unknownType bool
		for range n {
			key, err := d.DecodeString()
			if err != nil {
				return ev, fmt.Errorf("vllmevents: event key: %w", err)
			}
			if seen[key] {
				return ev, fmt.Errorf("vllmevents: event key %q twice", key)
			}
			seen[key] = true
			if key == "type" {
				if ev.Type, err = d.DecodeString(); err != nil {
					return ev, fmt.Errorf("vllmevents: type: %w", err)
				}
				if _, ok := fields[ev.Type]; !ok {
					unknownType = true
				}
				continue
			}
			if err := ev.field(d, key); err != nil {
				return ev, err
			}
		}
		if unknownType {
			return ev, ErrUnknownType
		}
		want, ok := fields[ev.Type]
		if !ok {
			return ev, errors.New(`vllmevents: event map without "type"`)
		}
		for _, f := range want[:required[ev.Type]] {
			if !seen[f] {
				return ev, fmt.Errorf("vllmevents: %s without %s", ev.Type, f)
			}
		}
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := arrayLen(d, 64, "event")
		if err != nil {
			return ev, err
		}
		if n == 0 {
			return ev, errors.New("vllmevents: empty event array")
		}
		if ev.Type, err = d.DecodeString(); err != nil {
			return ev, fmt.Errorf("vllmevents: event tag: %w", err)
		}
		want, ok := fields[ev.Type]
		if !ok {
			for i := 1; i < n; i++ {
				if err := skip(d, 0); err != nil {
					return ev, err
				}
			}
			return ev, ErrUnknownType
		}
		if n-1 < required[ev.Type] {
			return ev, fmt.Errorf("vllmevents: %s has %d fields, want at least %d", ev.Type, n-1, required[ev.Type])
		}
		for i := 1; i < n; i++ {
			if i-1 >= len(want) {
				if err := skip(d, 0); err != nil { // fields added after lora_name
					return ev, err
				}
				continue
			}
			if err := ev.field(d, want[i-1]); err != nil {
				return ev, err
			}
		}
	default:
		return ev, fmt.Errorf("vllmevents: event is msgpack code %#x, want a map or an array", c)
	}
	if ev.Type == TypeStored {
		if ev.BlockSize < 1 || ev.BlockSize > MaxBlockSize {
			return ev, fmt.Errorf("vllmevents: block_size %d", ev.BlockSize)
		}
		if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
			return ev, fmt.Errorf("vllmevents: %d token ids for %d blocks of %d", len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)
		}
	}
	return ev, nil
}

// field decodes the named field's value into ev; a field the type does not have is skipped.
func (ev *Event) field(d *msgpack.Decoder, key string) error {
	var err error
	switch key {
	case "block_hashes":
		var n int
		if n, err = arrayLen(d, MaxBlocks, key); err != nil {
			return err
		}
		ev.BlockHashes = make([]uint64, 0, min(n, 1024))
		for range n {
			h, err := hash(d)
			if err != nil {
				return err
			}
			ev.BlockHashes = append(ev.BlockHashes, h)
		}
		return nil
	case "parent_block_hash":
		if isNil(d) {
			return d.DecodeNil()
		}
		ev.HasParent = true
		ev.Parent, err = hash(d)
	case "token_ids":
		var n int
		if n, err = arrayLen(d, MaxTokens, key); err != nil {
			return err
		}
		ev.TokenIDs = make([]int32, 0, min(n, 4096))
		for range n {
			t, err := d.DecodeInt64()
			if err != nil || t < 0 || t > 1<<31-1 {
				return fmt.Errorf("vllmevents: token id %d: %v", t, err)
			}
			ev.TokenIDs = append(ev.TokenIDs, int32(t))
		}
		return nil
	case "block_size":
		var v int64
		v, err = d.DecodeInt64()
		ev.BlockSize = int(max(-1, min(v, MaxBlockSize+1)))
	case "lora_id":
		ev.HasLoraID, err = nullableInt(d, &ev.LoraID)
	case "medium", "lora_name":
		var s string
		if !isNil(d) {
			if s, err = d.DecodeString(); err == nil && len(s) > 256 {
				err = errors.New("too long")
			}
		} else {
			err = d.DecodeNil()
		}
		if key == "medium" {
			ev.Medium = s
		} else {
			ev.LoraName = s
		}
	default:
		return skip(d, 0) // extra_keys, group_idx, metadata, ...
	}
	if err != nil {
		return fmt.Errorf("vllmevents: %s: %w", key, err)
	}
	return nil
}

func isNil(d *msgpack.Decoder) bool {
	c, err := d.PeekCode()
	return err == nil && c == msgpcode.Nil
}

func nullableInt(d *msgpack.Decoder, v *int64) (bool, error) {
	if isNil(d) {
		return false, d.DecodeNil()
	}
	var err error
	*v, err = d.DecodeInt64()
	return err == nil, err
}

// hash reads one block hash: an integer (a negative one, as SGLang's Python hash() gives, is
// taken by its 64 bits) or up to 64 bytes (folded by FNV-1a).
func hash(d *msgpack.Decoder) (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, fmt.Errorf("vllmevents: block hash: %w", err)
	}
	switch {
	case c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32:
		n, err := d.DecodeBytesLen()
		if err != nil || n < 1 || n > 64 {
			return 0, fmt.Errorf("vllmevents: block hash of %d bytes: %v", n, err)
		}
		var buf [64]byte
		if err := d.ReadFull(buf[:n]); err != nil {
			return 0, fmt.Errorf("vllmevents: block hash: %w", err)
		}
		if n == 8 {
			return binary.BigEndian.Uint64(buf[:8]), nil
		}
		f := fnv.New64a()
		f.Write(buf[:n])
		return f.Sum64(), nil
	case c >= msgpcode.NegFixedNumLow || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64:
		v, err := d.DecodeInt64()
		return uint64(v), err
	case c <= msgpcode.PosFixedNumHigh || c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64:
		return d.DecodeUint64()
	}
	return 0, fmt.Errorf("vllmevents: block hash is msgpack code %#x", c)
}

// skip skips one value, nesting at most maxDepth deep (msgpack's own Skip recurses without a
// bound: a payload of nested arrays would exhaust the stack).
func skip(d *msgpack.Decoder, depth int) error {
	if depth > maxDepth {
		return errors.New("vllmevents: nested too deep")
	}
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	var n int
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if n, err = d.DecodeArrayLen(); err != nil {
			return err
		}
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if n, err = d.DecodeMapLen(); err != nil {
			return err
		}
		n *= 2
	default:
		return d.Skip()
	}
	for range n {
		if err := skip(d, depth+1); err != nil {
			return err
		}
	}
	return nil
}
