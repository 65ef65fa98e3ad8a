package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// Writer builds a GGUF version 3 file. Output is deterministic: metadata in
// the order keys were first Set, tensors in the order they were added, each
// tensor's data padded with zeros to the alignment.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	keys    []string
	values  map[string]Value
	tensors []writerTensor
	names   map[string]bool
}

type writerTensor struct {
	info TensorInfo
	data []byte // the caller's bytes; must not change until WriteTo returns
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{values: map[string]Value{}, names: map[string]bool{}}
}

// Set stores v under key. Setting a key again replaces its value but keeps
// its first position. v is one of string, bool, uint8..uint64, int8..int64,
// float32, float64, the slices []string, []float32, []float64, []int8,
// []int16, []int32, []int64, []uint8, []uint16, []uint32, []uint64, []bool,
// or a Value (for example one read from a File). Slices are copied. Any other
// type is a programmer bug and panics.
func (w *Writer) Set(key string, v any) {
	val, err := toValue(v)
	if err != nil {
		panic(fmt.Sprintf("gguf: Set(%q): %v", key, err))
	}
	if _, ok := w.values[key]; !ok {
		w.keys = append(w.keys, key)
	}
	w.values[key] = val
}

func toValue(v any) (Value, error) {
	switch x := v.(type) {
	case Value:
		return x, checkValue(x, 0)
	case uint8:
		return Value{Type: ValueUint8, Data: x}, nil
	case int8:
		return Value{Type: ValueInt8, Data: x}, nil
	case uint16:
		return Value{Type: ValueUint16, Data: x}, nil
	case int16:
		return Value{Type: ValueInt16, Data: x}, nil
	case uint32:
		return Value{Type: ValueUint32, Data: x}, nil
	case int32:
		return Value{Type: ValueInt32, Data: x}, nil
	case float32:
		return Value{Type: ValueFloat32, Data: x}, nil
	case bool:
		return Value{Type: ValueBool, Data: x}, nil
	case string:
		return Value{Type: ValueString, Data: x}, nil
	case uint64:
		return Value{Type: ValueUint64, Data: x}, nil
	case int64:
		return Value{Type: ValueInt64, Data: x}, nil
	case float64:
		return Value{Type: ValueFloat64, Data: x}, nil
	case []uint8:
		return arrayValue(ValueUint8, x), nil
	case []int8:
		return arrayValue(ValueInt8, x), nil
	case []uint16:
		return arrayValue(ValueUint16, x), nil
	case []int16:
		return arrayValue(ValueInt16, x), nil
	case []uint32:
		return arrayValue(ValueUint32, x), nil
	case []int32:
		return arrayValue(ValueInt32, x), nil
	case []float32:
		return arrayValue(ValueFloat32, x), nil
	case []bool:
		return arrayValue(ValueBool, x), nil
	case []string:
		return arrayValue(ValueString, x), nil
	case []uint64:
		return arrayValue(ValueUint64, x), nil
	case []int64:
		return arrayValue(ValueInt64, x), nil
	case []float64:
		return arrayValue(ValueFloat64, x), nil
	}
	return Value{}, fmt.Errorf("unsupported value type %T", v)
}

func arrayValue[T any](elem ValueType, x []T) Value {
	return Value{Type: ValueArray, Elem: elem, Data: append([]T(nil), x...)}
}

// checkValue reports whether a Value's Data matches its Type.
func checkValue(v Value, depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("arrays nested deeper than %d", maxDepth)
	}
	if v.Type != ValueArray {
		got, err := toValue(v.Data)
		if err != nil || got.Type != v.Type {
			return fmt.Errorf("value of type %s holds %T", v.Type, v.Data)
		}
		return nil
	}
	if v.Elem == ValueArray {
		inner, ok := v.Data.([]Value)
		if !ok {
			return fmt.Errorf("array of arr holds %T", v.Data)
		}
		for _, e := range inner {
			if e.Type != ValueArray {
				return fmt.Errorf("array of arr holds a %s", e.Type)
			}
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	got, err := toValue(v.Data)
	if err != nil || got.Type != ValueArray || got.Elem != v.Elem {
		return fmt.Errorf("array of %s holds %T", v.Elem, v.Data)
	}
	return nil
}

// AddTensor appends a tensor. data must hold exactly t.RowBytes(dims[0]) *
// (product of the other dims) bytes; it is not copied and must not change
// until WriteTo returns.
func (w *Writer) AddTensor(name string, t Type, dims []uint64, data []byte) error {
	switch {
	case name == "":
		return errors.New("gguf: AddTensor: empty name")
	case len(name) > maxNameLen:
		return fmt.Errorf("gguf: AddTensor %s: name is %d bytes, longer than %d", name, len(name), maxNameLen)
	case w.names[name]:
		return fmt.Errorf("gguf: AddTensor %s: duplicate name", name)
	case !t.Valid():
		return fmt.Errorf("gguf: AddTensor %s: unsupported type %s", name, t)
	case len(dims) == 0 || len(dims) > maxDims:
		return fmt.Errorf("gguf: AddTensor %s: %d dims, want 1..%d", name, len(dims), maxDims)
	case dims[0]%uint64(t.BlockSize()) != 0:
		return fmt.Errorf("gguf: AddTensor %s: row length %d is not a multiple of the %s block size %d", name, dims[0], t, t.BlockSize())
	}
	elems := uint64(1)
	for _, d := range dims {
		if d != 0 && elems > math.MaxInt64/d {
			return fmt.Errorf("gguf: AddTensor %s: element count of dims %v overflows", name, dims)
		}
		elems *= d
	}
	blocks := elems / uint64(t.BlockSize())
	if blocks > math.MaxInt64/uint64(t.BlockBytes()) {
		return fmt.Errorf("gguf: AddTensor %s: byte size overflows", name)
	}
	size := blocks * uint64(t.BlockBytes())
	if uint64(len(data)) != size {
		return fmt.Errorf("gguf: AddTensor %s: %s %v needs %d bytes, have %d", name, t, dims, size, len(data))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{
		info: TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: t, Size: size},
		data: data,
	})
	return nil
}

func (w *Writer) alignment() (int, error) {
	v, ok := w.values[AlignmentKey]
	if !ok {
		return DefaultAlignment, nil
	}
	a, isU32 := v.Data.(uint32)
	if !isU32 || a == 0 || a&(a-1) != 0 || a > 1<<30 {
		return 0, fmt.Errorf("gguf: %s must be a u32 power of two up to 2^30, is %s %v", AlignmentKey, v.Type, v.Data)
	}
	return int(a), nil
}

// WriteTo writes the file (version 3) to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align, err := w.alignment()
	if err != nil {
		return 0, err
	}
	e := &encoder{w: bufio.NewWriterSize(out, 1<<20)}
	e.raw([]byte(magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.keys)))
	for _, k := range w.keys {
		v := w.values[k]
		e.str(k)
		e.u32(uint32(v.Type))
		e.value(v)
	}
	off := uint64(0)
	for _, t := range w.tensors {
		e.str(t.info.Name)
		e.u32(uint32(len(t.info.Dims)))
		for _, d := range t.info.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.info.Type))
		e.u64(off)
		off += padded(t.info.Size, align)
	}
	if len(w.tensors) > 0 {
		e.pad(align)
	}
	for _, t := range w.tensors {
		e.raw(t.data)
		e.pad(align)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.n, e.err
}

func padded(n uint64, align int) uint64 {
	a := uint64(align)
	return (n + a - 1) / a * a
}

// WriteFile writes the file to path atomically: to a temporary file in the
// same directory, synced, then renamed over path.
func (w *Writer) WriteFile(path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = w.WriteTo(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// encoder writes little-endian values and remembers the first error.
type encoder struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += int64(n)
	e.err = err
}

func (e *encoder) u8(v uint8) { e.raw([]byte{v}) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.raw(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.raw(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.raw(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		n, err := e.w.WriteString(s)
		e.n += int64(n)
		e.err = err
	}
}

var zeros [4096]byte

func (e *encoder) pad(align int) {
	for n := int(padded(uint64(e.n), align) - uint64(e.n)); n > 0; {
		k := min(n, len(zeros))
		e.raw(zeros[:k])
		n -= k
	}
}

func (e *encoder) value(v Value) {
	switch x := v.Data.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case bool:
		e.u8(b2u(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	default:
		e.u32(uint32(v.Elem))
		e.u64(uint64(v.Len()))
		e.array(v.Data)
	}
}

func (e *encoder) array(d any) {
	switch x := d.(type) {
	case []uint8:
		e.raw(x)
	case []int8:
		for _, v := range x {
			e.u8(uint8(v))
		}
	case []bool:
		for _, v := range x {
			e.u8(b2u(v))
		}
	case []uint16:
		for _, v := range x {
			e.u16(v)
		}
	case []int16:
		for _, v := range x {
			e.u16(uint16(v))
		}
	case []uint32:
		for _, v := range x {
			e.u32(v)
		}
	case []int32:
		for _, v := range x {
			e.u32(uint32(v))
		}
	case []float32:
		for _, v := range x {
			e.u32(math.Float32bits(v))
		}
	case []uint64:
		for _, v := range x {
			e.u64(v)
		}
	case []int64:
		for _, v := range x {
			e.u64(uint64(v))
		}
	case []float64:
		for _, v := range x {
			e.u64(math.Float64bits(v))
		}
	case []string:
		for _, v := range x {
			e.str(v)
		}
	case []Value:
		for _, v := range x {
			e.value(v)
		}
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
