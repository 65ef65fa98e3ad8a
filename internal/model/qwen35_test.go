package model_test

import (
	"bytes"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

func hybridFile(t *testing.T) *gguf.File { return presetFile(t, "tiny-qwen35") }

// presetFile builds a synthetic preset (f32, seed 1) in memory.
func presetFile(t testing.TB, preset string) *gguf.File {
	t.Helper()
	w, err := synth.Build(preset, synth.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// rewrite copies f with one tensor dropped (dims nil) or given other dims.
func rewrite(t *testing.T, f *gguf.File, name string, dims []uint64) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		w.Set(k, v.Data)
	}
	for _, ti := range f.Tensors() {
		data, err := f.TensorData(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		d := ti.Dims
		if ti.Name == name {
			if dims == nil {
				continue
			}
			d = dims
			n := uint64(1)
			for _, x := range d {
				n *= x
			}
			data = make([]byte, 4*n)
		}
		if err := w.AddTensor(ti.Name, ti.Type, d, data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestHybridBadFiles: a qwen35 file with a missing or mis-shaped state tensor, or without its
// DeltaNet keys, fails at load naming what is wrong.
func TestHybridBadFiles(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	f := hybridFile(t)
	if _, err := model.Load(f, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tensor string
		dims   []uint64
	}{
		{"blk.0.ssm_conv1d.weight", nil},
		{"blk.1.ssm_a", nil},
		{"blk.2.ssm_a", []uint64{3}},
		{"blk.0.ssm_conv1d.weight", []uint64{3, 128}},
		{"blk.3.attn_q.weight", []uint64{64, 128}}, // no room for the output gate
	} {
		_, err := model.Load(rewrite(t, f, c.tensor, c.dims), pool)
		if err == nil || !strings.Contains(err.Error(), c.tensor) {
			t.Errorf("%s %v: err %v, want one naming the tensor", c.tensor, c.dims, err)
		}
	}
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		if k != "qwen35.ssm.state_size" {
			v, _ := f.Value(k)
			w.Set(k, v.Data)
		}
	}
	var buf bytes.Buffer
	w.WriteTo(&buf)
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.ParseConfig(g); err == nil || !strings.Contains(err.Error(), "ssm.state_size") {
		t.Errorf("no state_size: err %v", err)
	}
}

// TestHybridForwardNeedsState: a hybrid model refuses a sequence without its recurrent state,
// or whose state is not at the sequence's position, and advances a state it is given.
func TestHybridForwardNeedsState(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	m, err := model.Load(hybridFile(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, m, 32, kvcache.F32)
	toks := []int32{5, 6, 7}
	if err := m.Forward([]model.Sequence{{Tokens: toks, KV: r.kv}}); err == nil {
		t.Error("no state: accepted")
	}
	if err := m.Forward([]model.Sequence{{Tokens: toks, Pos: 4, KV: r.kv, State: r.state}}); err == nil {
		t.Error("state at 0, sequence at 4: accepted")
	}
	if err := m.Forward([]model.Sequence{{Tokens: toks, KV: r.kv, State: r.state}}); err != nil {
		t.Fatal(err)
	}
	if r.state.Pos != 3 || r.state.Bytes() != m.Config().StateBytes() {
		t.Errorf("state at %d with %d bytes, want 3 and %d", r.state.Pos, r.state.Bytes(), m.Config().StateBytes())
	}
	// A copy resumes where the original stands: the same next logits.
	cp := m.NewState()
	cp.CopyFrom(r.state)
	a, b := make([]float32, m.Config().Vocab), make([]float32, m.Config().Vocab)
	r2 := newRunner(t, m, 32, kvcache.F32)
	if err := m.Forward([]model.Sequence{{Tokens: toks, KV: r2.kv, State: r2.state}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward([]model.Sequence{{Tokens: []int32{8}, Pos: 3, KV: r.kv, State: r.state, Logits: a}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward([]model.Sequence{{Tokens: []int32{8}, Pos: 3, KV: r2.kv, State: cp, Logits: b}}); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logit %d: %v from the state, %v from its copy", i, a[i], b[i])
		}
	}
}

// FuzzHybridConfig feeds mutated qwen35 (and qwen3) files to ParseConfig and Load: they return
// an error or a model, never panic.
func FuzzHybridConfig(f *testing.F) {
	for _, preset := range []string{"tiny-qwen35", "tiny-qwen3"} {
		w, err := synth.Build(preset, synth.Options{Seed: 1})
		if err != nil {
			f.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	pool := kernels.NewPool(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(data)
		if err != nil {
			return
		}
		if _, err := model.ParseConfig(g); err != nil {
			return
		}
		m, err := model.Load(g, pool)
		if err == nil && m.Config().StateBytes() > 1<<30 {
			t.Fatalf("state of %d bytes per sequence accepted", m.Config().StateBytes())
		}
	})
}

// TestHybridCheckpointResume: for qwen35 and kimi-linear, states checkpointed at block boundaries during one prefill, or
// during a prefill in odd chunks, are bitwise the same, survive AppendBinary/DecodeState, and
// resuming from any of them gives bitwise the logits of the uninterrupted run.
func TestHybridCheckpointResume(t *testing.T) {
	for _, preset := range []string{"tiny-qwen35", "tiny-kimi-linear"} {
		t.Run(preset, func(t *testing.T) { testCheckpointResume(t, preset) })
	}
}

func testCheckpointResume(t *testing.T, preset string) {
	pool := kernels.NewPool(2)
	defer pool.Close()
	m, err := model.Load(presetFile(t, preset), pool)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	prompt := make([]int32, 70)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 13) % c.Vocab)
	}
	bounds := []int{16, 32, 48, 64}
	checkpoints := func(from, to int) []*model.State {
		var cps []*model.State
		for _, b := range bounds {
			if b > from && b <= to {
				cp := m.NewState()
				cp.Pos = b
				cps = append(cps, cp)
			}
		}
		return cps
	}
	// One shot.
	r := newRunner(t, m, len(prompt), kvcache.F32)
	want := make([]float32, c.Vocab)
	cps := checkpoints(0, len(prompt))
	if err := m.Forward([]model.Sequence{{Tokens: prompt, KV: r.kv, State: r.state, Logits: want, Checkpoints: cps}}); err != nil {
		t.Fatal(err)
	}
	// In chunks of 7: the same checkpoints.
	rc := newRunner(t, m, len(prompt), kvcache.F32)
	var chunked []*model.State
	for pos := 0; pos < len(prompt); pos += 7 {
		end := min(pos+7, len(prompt))
		got := checkpoints(pos, end)
		if err := m.Forward([]model.Sequence{{Tokens: prompt[pos:end], Pos: pos, KV: rc.kv, State: rc.state, Checkpoints: got}}); err != nil {
			t.Fatal(err)
		}
		chunked = append(chunked, got...)
	}
	for i, cp := range cps {
		a, _ := cp.AppendBinary(nil)
		b, _ := chunked[i].AppendBinary(nil)
		if !bytes.Equal(a, b) {
			t.Fatalf("checkpoint at %d differs between one shot and chunks of 7", cp.Pos)
		}
		st, err := m.DecodeState(a)
		if err != nil {
			t.Fatal(err)
		}
		have := make([]float32, c.Vocab)
		if err := m.Forward([]model.Sequence{{Tokens: prompt[cp.Pos:], Pos: cp.Pos, KV: r.kv, State: st, Logits: have}}); err != nil {
			t.Fatal(err)
		}
		for j := range want {
			if have[j] != want[j] {
				t.Fatalf("resumed at %d: logit %d = %v, want %v (bitwise)", cp.Pos, j, have[j], want[j])
			}
		}
	}
	// Misplaced checkpoints are refused.
	bad := m.NewState()
	bad.Pos = 3
	if err := m.Forward([]model.Sequence{{Tokens: prompt[:2], KV: r.kv, State: m.NewState(), Checkpoints: []*model.State{bad}}}); err == nil {
		t.Error("checkpoint past the step accepted")
	}
}

// TestDecodeStateRefuses: truncated, foreign and non-finite state bytes are refused.
func TestDecodeStateRefuses(t *testing.T) {
	pool := kernels.NewPool(1)
	defer pool.Close()
	m, err := model.Load(hybridFile(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := m.NewState().AppendBinary(nil)
	if _, err := m.DecodeState(good); err != nil {
		t.Fatal(err)
	}
	nan := append([]byte(nil), good...)
	copy(nan[len(nan)-4:], []byte{0, 0, 0xc0, 0x7f})
	wrongMagic := append([]byte(nil), good...)
	wrongMagic[0] = 'X'
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)-4], "longer": append(append([]byte(nil), good...), 0, 0, 0, 0),
		"empty": nil, "nan": nan, "magic": wrongMagic,
	} {
		if _, err := m.DecodeState(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if f := m.Config().StateFormat(); f == "" || !strings.Contains(f, "gdn1") {
		t.Errorf("state format %q", f)
	}
}

// FuzzDecodeState: any bytes decode to an error or to a state that encodes back to them.
func FuzzDecodeState(f *testing.F) {
	w, err := synth.Build("tiny-qwen35", synth.Options{Seed: 1})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	w.WriteTo(&buf)
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		f.Fatal(err)
	}
	m, err := model.Load(g, kernels.NewPool(1))
	if err != nil {
		f.Fatal(err)
	}
	good, _ := m.NewState().AppendBinary(nil)
	f.Add(good)
	f.Add(good[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := m.DecodeState(b)
		if err != nil {
			return
		}
		again, _ := st.AppendBinary(nil)
		if !bytes.Equal(again, b) {
			t.Fatal("decode/encode changed the bytes")
		}
	})
}

// BenchmarkStateCodec: encoding and decoding one small-kimi-k3 checkpoint (261,632 bytes), what
// a restore does once per checkpoint block (7,679 times at 480K tokens); bytes/s is the
// checkpoint's bytes.
func BenchmarkStateCodec(b *testing.B) {
	w, err := synth.Build("small-kimi-k3", synth.Options{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	w.WriteTo(&buf)
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(g, kernels.NewPool(1))
	if err != nil {
		b.Fatal(err)
	}
	enc, _ := m.NewState().AppendBinary(nil)
	b.Run("encode", func(b *testing.B) {
		st := m.NewState()
		out := make([]byte, 0, len(enc))
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			out, _ = st.AppendBinary(out[:0])
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := m.DecodeState(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
