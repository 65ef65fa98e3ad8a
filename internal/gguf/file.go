package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrFormat is wrapped by every error about malformed or unsupported file
// contents.
var ErrFormat = errors.New("gguf: invalid file")

// ErrNotFound is returned by TensorData for a name the file does not hold.
var ErrNotFound = errors.New("gguf: no such tensor")

// ErrClosed is returned by TensorData after Close.
var ErrClosed = errors.New("gguf: file closed")

const (
	magic = "GGUF"
	// DefaultAlignment is the data alignment when general.alignment is absent.
	DefaultAlignment = 32
	// AlignmentKey is the metadata key that overrides the alignment (u32).
	AlignmentKey = "general.alignment"
	// maxDims is ggml's GGML_MAX_DIMS.
	maxDims = 4
	// maxNameLen is ggml's GGML_MAX_NAME (64) less the terminating NUL: longer
	// tensor names are rejected by llama.cpp, so we reject them too.
	maxNameLen = 63
	// maxDepth bounds array nesting. Real files nest at most once (merges
	// are strings); the bound keeps hostile input from recursing deeply.
	maxDepth = 8
)

// TensorInfo describes one tensor. Dims[0] is the innermost dimension (the
// row length); Offset is relative to the start of the data section; Size is
// the tensor's byte size.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   Type
	Offset uint64
	Size   uint64
}

// Elements returns the product of Dims.
func (ti TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range ti.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file. Its methods are safe for concurrent use except
// Close, which must not race with TensorData.
type File struct {
	data       []byte // whole file; for Open, the mapping
	unmap      func([]byte) error
	closed     bool
	version    uint32
	alignment  int
	dataOffset uint64 // absolute offset of the data section

	keys    []string
	values  map[string]Value
	tensors []TensorInfo
	byName  map[string]int
}

// Version returns the GGUF version (2 or 3).
func (f *File) Version() uint32 { return f.version }

// Alignment returns the data alignment (general.alignment or 32).
func (f *File) Alignment() int { return f.alignment }

// DataOffset returns the absolute file offset of the data section.
func (f *File) DataOffset() uint64 { return f.dataOffset }

// Keys returns the metadata keys in file order. The slice is shared.
func (f *File) Keys() []string { return f.keys }

// Value returns the value stored under key.
func (f *File) Value(key string) (Value, bool) {
	v, ok := f.values[key]
	return v, ok
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.values[key].Data.(string)
	return s, ok
}

// Uint returns an integer value of any integer type if it is >= 0.
func (f *File) Uint(key string) (uint64, bool) {
	v := f.values[key].Data
	if u, ok := v.(uint64); ok {
		return u, true
	}
	i, ok := asInt(v)
	if !ok || i < 0 {
		return 0, false
	}
	return uint64(i), true
}

// Int returns an integer value of any integer type that fits in int64.
func (f *File) Int(key string) (int64, bool) { return asInt(f.values[key].Data) }

// Float returns a float32/float64 value, or an integer value as a float.
func (f *File) Float(key string) (float64, bool) {
	switch x := f.values[key].Data.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	case uint64:
		return float64(x), true
	}
	i, ok := asInt(f.values[key].Data)
	return float64(i), ok
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.values[key].Data.(bool)
	return b, ok
}

// Strings returns an array of strings. The slice is shared: never modify it.
func (f *File) Strings(key string) ([]string, bool) {
	s, ok := f.values[key].Data.([]string)
	return s, ok
}

// Floats returns an array of f32 (or f64, narrowed) as a new slice.
func (f *File) Floats(key string) ([]float32, bool) {
	switch x := f.values[key].Data.(type) {
	case []float32:
		out := make([]float32, len(x))
		copy(out, x)
		return out, true
	case []float64:
		out := make([]float32, len(x))
		for i, v := range x {
			out[i] = float32(v)
		}
		return out, true
	}
	return nil, false
}

// Ints returns an array of any integer type as a new []int64.
func (f *File) Ints(key string) ([]int64, bool) { return intsOf(f.values[key].Data) }

// Tensors returns the tensor descriptors in file order. The slice is shared.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Tensor returns the descriptor of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// TensorData returns the bytes of the named tensor: a view into the file (the
// mapping for Open), valid until Close. Never modify it; for Open it is
// mapped read-only and a write faults.
func (f *File) TensorData(name string) ([]byte, error) {
	if f.closed {
		return nil, ErrClosed
	}
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	ti := f.tensors[i]
	// The parser checked dataOffset+Offset+Size <= len(data) without overflow.
	start := f.dataOffset + ti.Offset
	return f.data[start : start+ti.Size : start+ti.Size], nil
}

// Close releases the mapping (for Open). Views returned by TensorData must
// not be used afterwards.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	data := f.data
	f.data = nil
	if f.unmap != nil {
		return f.unmap(data)
	}
	return nil
}

// Parse parses a GGUF file held in data. The File keeps data (TensorData
// returns views of it); the caller must not modify it.
func Parse(data []byte) (*File, error) {
	p := parser{b: data}
	f, err := p.file()
	if err != nil {
		return nil, err
	}
	f.data = data
	return f, nil
}

// parser reads little-endian values from b at off. Every read checks the
// bytes left first; errors name the offset.
type parser struct {
	b   []byte
	off int
}

func (p *parser) left() int { return len(p.b) - p.off }

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

func (p *parser) need(n int, what string) error {
	if n < 0 || p.left() < n {
		return p.errorf("%s at offset %d: need %d bytes, %d left (file size %d)", what, p.off, n, p.left(), len(p.b))
	}
	return nil
}

func (p *parser) u8(what string) (uint8, error) {
	if err := p.need(1, what); err != nil {
		return 0, err
	}
	v := p.b[p.off]
	p.off++
	return v, nil
}

func (p *parser) u16(what string) (uint16, error) {
	if err := p.need(2, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint16(p.b[p.off:])
	p.off += 2
	return v, nil
}

func (p *parser) u32(what string) (uint32, error) {
	if err := p.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(p.b[p.off:])
	p.off += 4
	return v, nil
}

func (p *parser) u64(what string) (uint64, error) {
	if err := p.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(p.b[p.off:])
	p.off += 8
	return v, nil
}

// str reads a u64 length and that many bytes, copied into a new string.
func (p *parser) str(what string) (string, error) {
	start := p.off
	n, err := p.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(p.left()) {
		return "", p.errorf("%s at offset %d: length %d exceeds the %d bytes left (file size %d)", what, start, n, p.left(), len(p.b))
	}
	s := string(p.b[p.off : p.off+int(n)])
	p.off += int(n)
	return s, nil
}

func (p *parser) file() (*File, error) {
	if len(p.b) < 4 || string(p.b[:4]) != magic {
		m := p.b[:min(4, len(p.b))]
		return nil, p.errorf("bad magic %q, want %q", m, magic)
	}
	p.off = 4
	version, err := p.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, p.errorf("GGUF version 1 is not supported (only 2 and 3)")
	case version&0xFFFF == 0 && version != 0:
		return nil, p.errorf("GGUF version %#x looks byte-swapped: big-endian files are not supported", version)
	case version != 2 && version != 3:
		return nil, p.errorf("GGUF version %d is not supported (only 2 and 3)", version)
	}
	nTensors, err := p.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := p.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes and
	// each tensor info at least 8 + 4 + 8 + 4 + 8, so counts that cannot fit
	// in the rest of the file are rejected before anything is allocated.
	if nKV > uint64(p.left())/13 {
		return nil, p.errorf("metadata count %d cannot fit in the %d bytes left", nKV, p.left())
	}
	f := &File{
		version:   version,
		alignment: DefaultAlignment,
		keys:      make([]string, 0, nKV),
		values:    make(map[string]Value, nKV),
	}
	for i := uint64(0); i < nKV; i++ {
		start := p.off
		key, err := p.str(fmt.Sprintf("key %d", i))
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, p.errorf("key %d at offset %d is empty", i, start)
		}
		if _, dup := f.values[key]; dup {
			return nil, p.errorf("duplicate key %q at offset %d", key, start)
		}
		vt, err := p.u32(fmt.Sprintf("key %q type", key))
		if err != nil {
			return nil, err
		}
		v, err := p.value(ValueType(vt), key, 0)
		if err != nil {
			return nil, err
		}
		f.keys = append(f.keys, key)
		f.values[key] = v
	}
	if v, ok := f.values[AlignmentKey]; ok {
		a, isU32 := v.Data.(uint32)
		if !isU32 {
			return nil, p.errorf("key %s must be u32, is %s", AlignmentKey, v.Type)
		}
		if a == 0 || a&(a-1) != 0 || a > 1<<30 {
			return nil, p.errorf("key %s = %d is not a power of two in [1, 2^30]", AlignmentKey, a)
		}
		f.alignment = int(a)
	}

	if nTensors > uint64(p.left())/32 {
		return nil, p.errorf("tensor count %d cannot fit in the %d bytes left", nTensors, p.left())
	}
	f.tensors = make([]TensorInfo, 0, nTensors)
	f.byName = make(map[string]int, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		ti, err := p.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[ti.Name]; dup {
			return nil, p.errorf("duplicate tensor name %q (tensor %d)", ti.Name, i)
		}
		f.byName[ti.Name] = len(f.tensors)
		f.tensors = append(f.tensors, ti)
	}

	// The data section starts at the next multiple of the alignment.
	align := uint64(f.alignment)
	f.dataOffset = uint64(p.off)
	if nTensors > 0 {
		f.dataOffset = (f.dataOffset + align - 1) / align * align
		if f.dataOffset > uint64(len(p.b)) {
			return nil, p.errorf("data section at offset %d is past end of file (size %d)", f.dataOffset, len(p.b))
		}
	}
	fileSize := uint64(len(p.b))
	for _, ti := range f.tensors {
		if ti.Offset%align != 0 {
			return nil, p.errorf("tensor %s: offset %d is not a multiple of the alignment %d", ti.Name, ti.Offset, align)
		}
		if ti.Offset > fileSize-f.dataOffset || ti.Size > fileSize-f.dataOffset-ti.Offset {
			// Reported as absolute offsets; the sums are printed as exact
			// values even when they would overflow a uint64 comparison.
			return nil, p.errorf("tensor %s: data [%d, %d) past end of file (size %d)", ti.Name,
				addSat(f.dataOffset, ti.Offset), addSat(addSat(f.dataOffset, ti.Offset), ti.Size), fileSize)
		}
	}
	return f, nil
}

// addSat adds with saturation at MaxUint64, for error messages.
func addSat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func (p *parser) tensorInfo(i uint64) (TensorInfo, error) {
	start := p.off
	name, err := p.str(fmt.Sprintf("tensor %d name", i))
	if err != nil {
		return TensorInfo{}, err
	}
	if name == "" {
		return TensorInfo{}, p.errorf("tensor %d at offset %d: empty name", i, start)
	}
	if len(name) > maxNameLen {
		return TensorInfo{}, p.errorf("tensor %d at offset %d: name %q is %d bytes, longer than %d", i, start, name, len(name), maxNameLen)
	}
	nDims, err := p.u32("tensor " + name + " dim count")
	if err != nil {
		return TensorInfo{}, err
	}
	if nDims == 0 || nDims > maxDims {
		return TensorInfo{}, p.errorf("tensor %s: %d dims, want 1..%d", name, nDims, maxDims)
	}
	ti := TensorInfo{Name: name, Dims: make([]uint64, nDims)}
	elems := uint64(1)
	for d := range ti.Dims {
		n, err := p.u64(fmt.Sprintf("tensor %s dim %d", name, d))
		if err != nil {
			return TensorInfo{}, err
		}
		// ggml stores dims as int64; keep the product representable there.
		if n > math.MaxInt64 || (n != 0 && elems > math.MaxInt64/n) {
			return TensorInfo{}, p.errorf("tensor %s: element count of dims %v overflows", name, append(ti.Dims[:d:d], n))
		}
		ti.Dims[d] = n
		elems *= n
	}
	t, err := p.u32("tensor " + name + " type")
	if err != nil {
		return TensorInfo{}, err
	}
	ti.Type = Type(t)
	if !ti.Type.Valid() {
		return TensorInfo{}, p.errorf("tensor %s: unsupported tensor type %s (%d)", name, ti.Type, t)
	}
	bs := uint64(ti.Type.BlockSize())
	if ti.Dims[0]%bs != 0 {
		return TensorInfo{}, p.errorf("tensor %s: row length %d is not a multiple of the %s block size %d", name, ti.Dims[0], ti.Type, bs)
	}
	blocks := elems / bs
	bb := uint64(ti.Type.BlockBytes())
	if blocks > math.MaxInt64/bb {
		return TensorInfo{}, p.errorf("tensor %s: byte size of %d %s blocks overflows", name, blocks, ti.Type)
	}
	ti.Size = blocks * bb
	if ti.Offset, err = p.u64("tensor " + name + " offset"); err != nil {
		return TensorInfo{}, err
	}
	return ti, nil
}

// value reads a value of type vt (the type tag already consumed).
func (p *parser) value(vt ValueType, key string, depth int) (Value, error) {
	where := func() string { return fmt.Sprintf("key %q at offset %d", key, p.off) }
	switch vt {
	case ValueUint8:
		v, err := p.u8(where())
		return Value{Type: vt, Data: v}, err
	case ValueInt8:
		v, err := p.u8(where())
		return Value{Type: vt, Data: int8(v)}, err
	case ValueBool:
		v, err := p.u8(where())
		if err == nil && v > 1 {
			return Value{}, p.errorf("%s: bool byte is %d, want 0 or 1", where(), v)
		}
		return Value{Type: vt, Data: v == 1}, err
	case ValueUint16:
		v, err := p.u16(where())
		return Value{Type: vt, Data: v}, err
	case ValueInt16:
		v, err := p.u16(where())
		return Value{Type: vt, Data: int16(v)}, err
	case ValueUint32:
		v, err := p.u32(where())
		return Value{Type: vt, Data: v}, err
	case ValueInt32:
		v, err := p.u32(where())
		return Value{Type: vt, Data: int32(v)}, err
	case ValueFloat32:
		v, err := p.u32(where())
		return Value{Type: vt, Data: math.Float32frombits(v)}, err
	case ValueUint64:
		v, err := p.u64(where())
		return Value{Type: vt, Data: v}, err
	case ValueInt64:
		v, err := p.u64(where())
		return Value{Type: vt, Data: int64(v)}, err
	case ValueFloat64:
		v, err := p.u64(where())
		return Value{Type: vt, Data: math.Float64frombits(v)}, err
	case ValueString:
		s, err := p.str(fmt.Sprintf("key %q string", key))
		return Value{Type: vt, Data: s}, err
	case ValueArray:
		return p.array(key, depth)
	}
	return Value{}, p.errorf("key %q at offset %d: unknown value type %d", key, p.off-4, uint32(vt))
}

func (p *parser) array(key string, depth int) (Value, error) {
	start := p.off
	if depth >= maxDepth {
		return Value{}, p.errorf("key %q at offset %d: arrays nested deeper than %d", key, start, maxDepth)
	}
	et, err := p.u32(fmt.Sprintf("key %q array type", key))
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	n, err := p.u64(fmt.Sprintf("key %q array count", key))
	if err != nil {
		return Value{}, err
	}
	// Smallest encoding of one element: strings take an 8-byte length,
	// nested arrays a 4-byte type and an 8-byte count.
	minSize := elem.scalarSize()
	switch {
	case minSize < 0:
		return Value{}, p.errorf("key %q at offset %d: unknown array element type %d", key, start, et)
	case elem == ValueString:
		minSize = 8
	case elem == ValueArray:
		minSize = 12
	}
	if n > uint64(p.left()/minSize) {
		return Value{}, p.errorf("key %q at offset %d: array of %d %s needs at least %d bytes per element, %d bytes left",
			key, start, n, elem, minSize, p.left())
	}
	cnt := int(n)
	v := Value{Type: ValueArray, Elem: elem}
	b := p.b[p.off:]
	switch elem {
	case ValueUint8:
		v.Data = readArray(b, cnt, 1, func(b []byte) uint8 { return b[0] })
	case ValueInt8:
		v.Data = readArray(b, cnt, 1, func(b []byte) int8 { return int8(b[0]) })
	case ValueBool:
		for i := range cnt {
			if b[i] > 1 {
				return Value{}, p.errorf("key %q element %d at offset %d: bool byte is %d, want 0 or 1", key, i, p.off+i, b[i])
			}
		}
		v.Data = readArray(b, cnt, 1, func(b []byte) bool { return b[0] == 1 })
	case ValueUint16:
		v.Data = readArray(b, cnt, 2, binary.LittleEndian.Uint16)
	case ValueInt16:
		v.Data = readArray(b, cnt, 2, func(b []byte) int16 { return int16(binary.LittleEndian.Uint16(b)) })
	case ValueUint32:
		v.Data = readArray(b, cnt, 4, binary.LittleEndian.Uint32)
	case ValueInt32:
		v.Data = readArray(b, cnt, 4, func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) })
	case ValueFloat32:
		v.Data = readArray(b, cnt, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
	case ValueUint64:
		v.Data = readArray(b, cnt, 8, binary.LittleEndian.Uint64)
	case ValueInt64:
		v.Data = readArray(b, cnt, 8, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) })
	case ValueFloat64:
		v.Data = readArray(b, cnt, 8, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) })
	case ValueString:
		out := make([]string, cnt)
		for i := range out {
			if out[i], err = p.str(fmt.Sprintf("key %q element %d", key, i)); err != nil {
				return Value{}, err
			}
		}
		v.Data = out
		return v, nil
	case ValueArray:
		out := make([]Value, cnt)
		for i := range out {
			if out[i], err = p.array(key, depth+1); err != nil {
				return Value{}, err
			}
		}
		v.Data = out
		return v, nil
	}
	p.off += cnt * minSize
	return v, nil
}

// readArray decodes n fixed-size elements from b. REQUIRES: len(b) >= n*size.
func readArray[T any](b []byte, n, size int, get func([]byte) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = get(b[i*size:])
	}
	return out
}
