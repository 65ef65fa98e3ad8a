package vllmevents

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"stockpot/internal/kvtier"
)

func sampleBatch() Batch {
	return Batch{TS: 1712.5, HasDPRank: true, DPRank: 0, Events: []Event{
		{Type: TypeStored, BlockHashes: []uint64{1 << 63, 7}, TokenIDs: []int32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
		{Type: TypeStored, BlockHashes: []uint64{9}, HasParent: true, Parent: 7, TokenIDs: []int32{9, 10, 11, 12}, BlockSize: 4,
			HasLoraID: true, LoraID: 3, LoraName: "sql", Medium: "CPU"},
		{Type: TypeRemoved, BlockHashes: []uint64{9}, Medium: "CPU"},
		{Type: TypeCleared},
	}}
}

func TestRoundTrip(t *testing.T) {
	b := sampleBatch()
	enc, err := AppendBatch(nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	got, unknown, err := DecodeBatch(enc)
	if err != nil || unknown != 0 {
		t.Fatalf("decode: %v, %d unknown", err, unknown)
	}
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, b)
	}
	// The events are maps tagged by "type" with every field of vLLM's dataclass.
	var generic []any
	if err := msgpack.Unmarshal(enc, &generic); err != nil {
		t.Fatal(err)
	}
	ev := generic[1].([]any)[0].(map[string]any)
	for _, k := range []string{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"} {
		if _, ok := ev[k]; !ok {
			t.Errorf("BlockStored lacks %q: %v", k, ev)
		}
	}
	if len(ev) != 8 || ev["parent_block_hash"] != nil || ev["type"] != TypeStored {
		t.Errorf("BlockStored map %v", ev)
	}
}

// pack encodes v with msgpack (positional shapes, as msgspec's array_like structs write them).
func pack(t testing.TB, v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPositionalShapes(t *testing.T) {
	// vLLM before 0.26: arrays, the tag first; medium and lora_name appended over time.
	old := pack(t, []any{1.0, []any{
		[]any{"BlockStored", []any{uint64(5)}, nil, []any{1, 2}, 2, nil},
		[]any{"BlockStored", []any{uint64(6)}, uint64(5), []any{3, 4}, 2, nil, "GPU", nil, "future field"},
		[]any{"BlockRemoved", []any{uint64(6)}},
		[]any{"AllBlocksCleared"},
		[]any{"SomethingNew", 1, 2},
	}})
	b, unknown, err := DecodeBatch(old)
	if err != nil {
		t.Fatal(err)
	}
	if unknown != 1 || len(b.Events) != 4 || b.HasDPRank {
		t.Fatalf("got %+v, %d unknown", b, unknown)
	}
	if e := b.Events[1]; !e.HasParent || e.Parent != 5 || e.Medium != "GPU" || !reflect.DeepEqual(e.TokenIDs, []int32{3, 4}) {
		t.Fatalf("event %+v", e)
	}
	// SGLang: Python hash() values, negative ones included.
	sg := pack(t, []any{1.0, []any{[]any{"BlockStored", []any{int64(-2)}, int64(-3), []any{1}, 1, nil, "GPU"}}, 0})
	b, _, err = DecodeBatch(sg)
	if err != nil || b.Events[0].BlockHashes[0] != uint64(1<<64-2) || b.Events[0].Parent != uint64(1<<64-3) {
		t.Fatalf("sglang: %+v %v", b, err)
	}
	// Bytes hashes (vLLM with sha256 hashing).
	bh := pack(t, []any{1.0, []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{[]byte("0123456789abcdef0123456789abcdef")}, "medium": nil}}})
	if b, _, err = DecodeBatch(bh); err != nil || len(b.Events[0].BlockHashes) != 1 {
		t.Fatalf("bytes hash: %+v %v", b, err)
	}
}

func TestRejects(t *testing.T) {
	for name, payload := range map[string][]byte{
		"not msgpack":      {0xc1},
		"empty":            {},
		"batch not array":  pack(t, map[string]any{"ts": 1}),
		"short tokens":     pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1, 2}, nil, []any{1, 2, 3}, 2, nil}}}),
		"zero block size":  pack(t, []any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{}, 0, nil}}}),
		"hash is string":   pack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{"x"}}}}),
		"map without type": pack(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}}),
		"stored missing":   pack(t, []any{1.0, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{1}}}}),
		"negative token":   pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1, nil}}}),
		"trailing bytes":   append(pack(t, []any{1.0, []any{}}), 0),
		"deep nesting":     pack(t, []any{1.0, []any{[]any{"Unknown", nest(100)}}}),
	} {
		if _, _, err := DecodeBatch(payload); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func nest(n int) any {
	var v any = 1
	for range n {
		v = []any{v}
	}
	return v
}

func TestTiers(t *testing.T) {
	for _, tier := range []kvtier.Tier{kvtier.Device, kvtier.Host, kvtier.Disk, kvtier.Remote} {
		got, ok := TierOf(MediumOf(tier))
		if !ok || got != tier {
			t.Errorf("tier %v: %q → %v %v", tier, MediumOf(tier), got, ok)
		}
	}
	for _, m := range []string{"CPU_PINNED", "cpu", "LocalDisk", "REMOTE", ""} {
		if _, ok := TierOf(m); !ok {
			t.Errorf("%q not read", m)
		}
	}
	if _, ok := TierOf("TAPE"); ok {
		t.Error("TAPE read")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	b := sampleBatch()
	enc, _ := AppendBatch(nil, &b)
	f.Add(enc)
	f.Add(pack(f, []any{1.0, []any{[]any{"BlockStored", []any{int64(-2)}, nil, []any{1}, 1, nil, "GPU"}}, 0}))
	f.Add([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, _, err := DecodeBatch(data)
		if err != nil {
			return
		}
		for _, ev := range b.Events {
			if ev.Type == TypeStored && (ev.BlockSize < 1 || len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize) {
				t.Fatalf("accepted a malformed BlockStored: %+v", ev)
			}
		}
		// What decodes re-encodes and decodes to the same batch.
		enc, err := AppendBatch(nil, &b)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := DecodeBatch(enc)
		// The timestamp is compared by its bits: a NaN one (accepted: nothing reads it to
		// decide anything) is not equal to itself.
		if err == nil && math.Float64bits(again.TS) != math.Float64bits(b.TS) {
			t.Fatalf("re-encoded timestamp %v, decoded %v", again.TS, b.TS)
		}
		again.TS, b.TS = 0, 0
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(b)) {
			t.Fatalf("re-encoded batch differs: %v\n%+v\n%+v", err, again, b)
		}
	})
}

// normalize makes nil and empty slices alike for comparison.
func normalize(b Batch) Batch {
	for i := range b.Events {
		e := &b.Events[i]
		if len(e.BlockHashes) == 0 {
			e.BlockHashes = nil
		}
		if len(e.TokenIDs) == 0 {
			e.TokenIDs = nil
		}
	}
	if len(b.Events) == 0 {
		b.Events = nil
	}
	return b
}
