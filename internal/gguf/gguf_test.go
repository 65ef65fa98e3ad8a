package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestTypeLayout(t *testing.T) {
	tests := []struct {
		t                 Type
		name              string
		blockSize, blockB int
	}{
		{TypeF32, "F32", 1, 4},
		{TypeF16, "F16", 1, 2},
		{TypeBF16, "BF16", 1, 2},
		{TypeQ4_0, "Q4_0", 32, 18},
		{TypeQ5_0, "Q5_0", 32, 22},
		{TypeQ8_0, "Q8_0", 32, 34},
		{TypeQ4_K, "Q4_K", 256, 144},
		{TypeQ5_K, "Q5_K", 256, 176},
		{TypeQ6_K, "Q6_K", 256, 210},
		{TypeQ8_K, "Q8_K", 256, 292},
	}
	for _, tt := range tests {
		if !tt.t.Valid() || tt.t.String() != tt.name || tt.t.BlockSize() != tt.blockSize || tt.t.BlockBytes() != tt.blockB {
			t.Errorf("%d: have %v %s %d %d, want true %s %d %d", tt.t, tt.t.Valid(), tt.t, tt.t.BlockSize(), tt.t.BlockBytes(), tt.name, tt.blockSize, tt.blockB)
		}
		if have, want := tt.t.RowBytes(tt.blockSize*3), tt.blockB*3; have != want {
			t.Errorf("%s.RowBytes: have %d, want %d", tt.t, have, want)
		}
	}
	for _, bad := range []Type{3, 7, 31, 1 << 20} {
		if bad.Valid() {
			t.Errorf("%s: have Valid, want not", bad)
		}
	}
	if have := Type(7).String(); have != "Q5_1" {
		t.Errorf("Type(7).String(): have %q, want Q5_1", have)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("RowBytes(33) on Q8_0: have no panic, want panic")
		}
	}()
	TypeQ8_0.RowBytes(33)
}

// sampleWriter builds a small file with every value type and three tensors.
func sampleWriter(t testing.TB) *Writer {
	w := NewWriter()
	w.Set("general.architecture", "llama")
	w.Set("u8", uint8(7))
	w.Set("i8", int8(-7))
	w.Set("u16", uint16(65000))
	w.Set("i16", int16(-3000))
	w.Set("u32", uint32(4000000000))
	w.Set("i32", int32(-2000000000))
	w.Set("f32", float32(1.5))
	w.Set("bool", true)
	w.Set("u64", uint64(1<<63))
	w.Set("i64", int64(-1<<62))
	w.Set("f64", 2.25)
	w.Set("tokens", []string{"<s>", "</s>", "héllo", ""})
	w.Set("scores", []float32{0, -1.5, 2})
	w.Set("types", []int32{1, 3, -1})
	w.Set("bytes", []uint8{1, 2, 3})
	w.Set("flags", []bool{true, false})
	w.Set("nested", Value{Type: ValueArray, Elem: ValueArray, Data: []Value{
		{Type: ValueArray, Elem: ValueUint32, Data: []uint32{1, 2}},
		{Type: ValueArray, Elem: ValueString, Data: []string{"a"}},
	}})
	add := func(name string, ty Type, dims []uint64, fill byte) {
		n := ty.RowBytes(int(dims[0]))
		for _, d := range dims[1:] {
			n *= int(d)
		}
		data := bytes.Repeat([]byte{fill}, n)
		if err := w.AddTensor(name, ty, dims, data); err != nil {
			t.Fatal(err)
		}
	}
	add("token_embd.weight", TypeQ8_0, []uint64{64, 3}, 1)
	add("blk.0.attn_norm.weight", TypeF32, []uint64{5}, 2)
	add("blk.0.ffn_down.weight", TypeQ4_K, []uint64{256, 2, 1}, 3)
	return w
}

func encode(t testing.TB, w *Writer) []byte {
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo: have n=%d, want %d", n, buf.Len())
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	data := encode(t, sampleWriter(t))
	if again := encode(t, sampleWriter(t)); !bytes.Equal(data, again) {
		t.Fatalf("WriteTo is not deterministic")
	}
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version() != 3 || f.Alignment() != 32 || f.DataOffset()%32 != 0 {
		t.Errorf("have version %d alignment %d data offset %d, want 3 32 aligned", f.Version(), f.Alignment(), f.DataOffset())
	}
	wantKeys := []string{"general.architecture", "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "u64", "i64", "f64", "tokens", "scores", "types", "bytes", "flags", "nested"}
	if !reflect.DeepEqual(f.Keys(), wantKeys) {
		t.Errorf("Keys: have %v, want %v", f.Keys(), wantKeys)
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("String: have %q, want llama", s)
	}
	uints := []struct {
		key  string
		want uint64
		ok   bool
	}{{"u8", 7, true}, {"i8", 0, false}, {"u32", 4000000000, true}, {"u64", 1 << 63, true}, {"f32", 0, false}}
	for _, tt := range uints {
		if have, ok := f.Uint(tt.key); have != tt.want || ok != tt.ok {
			t.Errorf("Uint(%s): have %d %v, want %d %v", tt.key, have, ok, tt.want, tt.ok)
		}
	}
	ints := []struct {
		key  string
		want int64
		ok   bool
	}{{"i8", -7, true}, {"i16", -3000, true}, {"i32", -2000000000, true}, {"i64", -1 << 62, true}, {"u64", 0, false}, {"u16", 65000, true}}
	for _, tt := range ints {
		if have, ok := f.Int(tt.key); have != tt.want || ok != tt.ok {
			t.Errorf("Int(%s): have %d %v, want %d %v", tt.key, have, ok, tt.want, tt.ok)
		}
	}
	if v, ok := f.Float("f32"); v != 1.5 || !ok {
		t.Errorf("Float(f32): have %v %v, want 1.5", v, ok)
	}
	if v, ok := f.Float("f64"); v != 2.25 || !ok {
		t.Errorf("Float(f64): have %v %v, want 2.25", v, ok)
	}
	if v, ok := f.Float("i8"); v != -7 || !ok {
		t.Errorf("Float(i8): have %v %v, want -7", v, ok)
	}
	if v, ok := f.Bool("bool"); !v || !ok {
		t.Errorf("Bool: have %v %v, want true", v, ok)
	}
	if v, _ := f.Strings("tokens"); !reflect.DeepEqual(v, []string{"<s>", "</s>", "héllo", ""}) {
		t.Errorf("Strings: have %q", v)
	}
	if v, _ := f.Floats("scores"); !reflect.DeepEqual(v, []float32{0, -1.5, 2}) {
		t.Errorf("Floats: have %v", v)
	}
	if v, _ := f.Ints("types"); !reflect.DeepEqual(v, []int64{1, 3, -1}) {
		t.Errorf("Ints(types): have %v", v)
	}
	if v, _ := f.Ints("bytes"); !reflect.DeepEqual(v, []int64{1, 2, 3}) {
		t.Errorf("Ints(bytes): have %v", v)
	}
	if v, ok := f.Value("flags"); !ok || !reflect.DeepEqual(v.Data, []bool{true, false}) {
		t.Errorf("Value(flags): have %v", v)
	}
	if v, _ := f.Value("nested"); v.Len() != 2 || !reflect.DeepEqual(v.Data.([]Value)[0].Data, []uint32{1, 2}) {
		t.Errorf("Value(nested): have %+v", v)
	}
	wantT := []TensorInfo{
		{"token_embd.weight", []uint64{64, 3}, TypeQ8_0, 0, 204},
		{"blk.0.attn_norm.weight", []uint64{5}, TypeF32, 224, 20},
		{"blk.0.ffn_down.weight", []uint64{256, 2, 1}, TypeQ4_K, 256, 288},
	}
	if !reflect.DeepEqual(f.Tensors(), wantT) {
		t.Errorf("Tensors: have %+v, want %+v", f.Tensors(), wantT)
	}
	for i, ti := range wantT {
		d, err := f.TensorData(ti.Name)
		if err != nil || len(d) != int(ti.Size) || d[0] != byte(i+1) || d[len(d)-1] != byte(i+1) {
			t.Errorf("TensorData(%s): have len %d err %v", ti.Name, len(d), err)
		}
	}
	if _, err := f.TensorData("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TensorData(nope): have %v, want ErrNotFound", err)
	}
	// Rewriting a parsed file's values reproduces the same bytes.
	w2 := NewWriter()
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		w2.Set(k, v)
	}
	for _, ti := range f.Tensors() {
		d, _ := f.TensorData(ti.Name)
		if err := w2.AddTensor(ti.Name, ti.Type, ti.Dims, d); err != nil {
			t.Fatal(err)
		}
	}
	if again := encode(t, w2); !bytes.Equal(data, again) {
		t.Errorf("rewrite of parsed file differs")
	}
}

func TestAlignmentKey(t *testing.T) {
	w := sampleWriter(t)
	w.Set(AlignmentKey, uint32(64))
	f, err := Parse(encode(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment() != 64 || f.DataOffset()%64 != 0 || f.Tensors()[1].Offset != 256 {
		t.Errorf("have alignment %d, data offset %d, offset[1] %d; want 64, aligned, 256", f.Alignment(), f.DataOffset(), f.Tensors()[1].Offset)
	}
	w.Set(AlignmentKey, uint32(48))
	if _, err := w.WriteTo(&bytes.Buffer{}); err == nil {
		t.Errorf("alignment 48: have no error, want one")
	}
}

func TestOpenWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := sampleWriter(t).WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.TensorData("blk.0.attn_norm.weight")
	if err != nil || len(d) != 20 || d[0] != 2 {
		t.Errorf("TensorData: have %v %v", d, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.TensorData("blk.0.attn_norm.weight"); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: have %v, want ErrClosed", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("WriteFile left %d files, want 1", len(entries))
	}
	empty := filepath.Join(t.TempDir(), "empty.gguf")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty); !errors.Is(err, ErrFormat) {
		t.Errorf("Open(empty): have %v, want ErrFormat", err)
	}
}

// header builds a file start: magic, version, counts.
func header(version uint32, nTensors, nKV uint64) []byte {
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, nTensors)
	return binary.LittleEndian.AppendUint64(b, nKV)
}

func appendStr(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
}

func tensorHeader(name string, dims []uint64, ty uint32, off uint64) []byte {
	b := appendStr(header(3, 1, 0), name)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(dims)))
	for _, d := range dims {
		b = binary.LittleEndian.AppendUint64(b, d)
	}
	b = binary.LittleEndian.AppendUint32(b, ty)
	return binary.LittleEndian.AppendUint64(b, off)
}

func kv(key string, vt ValueType, payload ...byte) []byte {
	b := appendStr(header(3, 0, 1), key)
	b = binary.LittleEndian.AppendUint32(b, uint32(vt))
	return append(b, payload...)
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "bad magic"},
		{"magic", []byte("GGML...."), "bad magic"},
		{"v1", header(1, 0, 0), "version 1 is not supported"},
		{"v4", header(4, 0, 0), "version 4 is not supported"},
		{"big endian", header(3<<24, 0, 0), "byte-swapped"},
		{"truncated header", header(3, 0, 0)[:10], "tensor count at offset 8"},
		{"kv count", header(3, 0, 1<<40), "metadata count 1099511627776 cannot fit"},
		{"tensor count", header(3, 1<<40, 0), "tensor count 1099511627776 cannot fit"},
		{"key length", append(append(header(3, 0, 1), le64(1<<60)...), make([]byte, 16)...), "length 1152921504606846976 exceeds"},
		{"empty key", append(appendStr(header(3, 0, 1), ""), make([]byte, 16)...), "key 0 at offset 24 is empty"},
		{"value type", kv("k", 13), "unknown value type 13"},
		{"string length", kv("k", ValueString, le64(100)...), "exceeds the 0 bytes left"},
		{"bool", kv("k", ValueBool, 2), "bool byte is 2"},
		{"array count", kv("k", ValueArray, append(le32(uint32(ValueUint32)), le64(1<<62)...)...), "array of 4611686018427387904 u32"},
		{"string array count", kv("k", ValueArray, append(le32(uint32(ValueString)), le64(3)...)...), "array of 3 str"},
		{"array elem type", kv("k", ValueArray, append(le32(99), le64(0)...)...), "unknown array element type 99"},
		{"nesting", kv("k", ValueArray, bytes.Repeat(append(le32(uint32(ValueArray)), le64(1)...), 20)...), "nested deeper than 8"},
		{"alignment type", kv(AlignmentKey, ValueUint64, le64(32)...), "must be u32, is u64"},
		{"alignment value", kv(AlignmentKey, ValueUint32, le32(24)...), "not a power of two"},
		{"dims", tensorHeader("w", []uint64{1, 1, 1, 1, 1}, 0, 0), "tensor w: 5 dims, want 1..4"},
		{"zero dims", append(tensorHeader("w", nil, 0, 0), make([]byte, 16)...), "tensor w: 0 dims"},
		{"elements overflow", tensorHeader("w", []uint64{1 << 32, 1 << 32}, 0, 0), "element count of dims [4294967296 4294967296] overflows"},
		{"bytes overflow", tensorHeader("w", []uint64{1 << 62}, 0, 0), "byte size of 4611686018427387904 F32 blocks overflows"},
		{"unknown type", tensorHeader("w", []uint64{32}, 7, 0), "tensor w: unsupported tensor type Q5_1 (7)"},
		{"unknown type number", tensorHeader("w", []uint64{32}, 77, 0), "unsupported tensor type Type(77) (77)"},
		{"row length", tensorHeader("w", []uint64{33}, 8, 0), "row length 33 is not a multiple of the Q8_0 block size 32"},
		{"offset alignment", append(tensorHeader("w", []uint64{4}, 0, 8), make([]byte, 64)...), "offset 8 is not a multiple of the alignment 32"},
		{"past end", append(tensorHeader("blk.0.attn_q.weight", []uint64{32, 2}, 8, 32), make([]byte, 64)...), "tensor blk.0.attn_q.weight: data [128, 196) past end of file (size 147)"},
		{"offset overflow", append(tensorHeader("w", []uint64{4}, 0, 1<<63), make([]byte, 32)...), "data [9223372036854775872, 9223372036854775888) past end of file (size 89)"},
		{"name length", tensorHeader(strings.Repeat("x", 64), []uint64{4}, 0, 0), "is 64 bytes, longer than 63"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.data)
		if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: have %v, want ErrFormat containing %q", tt.name, err, tt.want)
		}
	}
}

func TestParseV2(t *testing.T) {
	data := encode(t, sampleWriter(t))
	binary.LittleEndian.PutUint32(data[4:], 2)
	f, err := Parse(data)
	if err != nil || f.Version() != 2 || len(f.Tensors()) != 3 {
		t.Errorf("v2: have %v, want 3 tensors", err)
	}
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensor("a", TypeF32, []uint64{4}, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		t    Type
		dims []uint64
		n    int
		want string
	}{
		{"a", TypeF32, []uint64{4}, 16, "duplicate"},
		{"", TypeF32, []uint64{4}, 16, "empty name"},
		{"b", Type(7), []uint64{32}, 24, "unsupported type Q5_1"},
		{"b", TypeQ8_0, []uint64{33}, 34, "not a multiple"},
		{"b", TypeQ8_0, []uint64{32}, 33, "needs 34 bytes, have 33"},
		{"b", TypeF32, nil, 0, "0 dims"},
	}
	for _, tt := range tests {
		err := w.AddTensor(tt.name, tt.t, tt.dims, make([]byte, tt.n))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("AddTensor(%q): have %v, want %q", tt.name, err, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	data := encode(f, sampleWriter(f))
	f.Add(data)
	for _, n := range []int{3, 24, 100, 200, len(data) - 1} {
		f.Add(data[:n])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		for _, ti := range file.Tensors() {
			d, err := file.TensorData(ti.Name)
			if err != nil || uint64(len(d)) != ti.Size {
				t.Fatalf("TensorData(%s): have %d bytes %v, want %d", ti.Name, len(d), err, ti.Size)
			}
		}
		for _, k := range file.Keys() {
			file.Value(k)
			file.Strings(k)
			file.Ints(k)
			file.Floats(k)
		}
	})
}
