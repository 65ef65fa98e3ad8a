package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type of a GGUF metadata value. The values are fixed by the
// file format (gguf.h enum gguf_type).
type ValueType uint32

const (
	ValueUint8   ValueType = 0
	ValueInt8    ValueType = 1
	ValueUint16  ValueType = 2
	ValueInt16   ValueType = 3
	ValueUint32  ValueType = 4
	ValueInt32   ValueType = 5
	ValueFloat32 ValueType = 6
	ValueBool    ValueType = 7
	ValueString  ValueType = 8
	ValueArray   ValueType = 9
	ValueUint64  ValueType = 10
	ValueInt64   ValueType = 11
	ValueFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"}

// String returns the short name gguf.cpp uses ("u32", "str", "arr").
func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// scalarSize is the encoded size of a fixed-size value type, 0 for string and
// array (variable) and -1 for an unknown type.
func (t ValueType) scalarSize() int {
	switch t {
	case ValueUint8, ValueInt8, ValueBool:
		return 1
	case ValueUint16, ValueInt16:
		return 2
	case ValueUint32, ValueInt32, ValueFloat32:
		return 4
	case ValueUint64, ValueInt64, ValueFloat64:
		return 8
	case ValueString, ValueArray:
		return 0
	}
	return -1
}

// Value is one metadata value.
//
// Data holds the Go value for Type: uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64 or float64. For an array
// (Type == ValueArray), Elem is the element type and Data is the matching
// slice ([]uint8 ... []float64, []bool, []string), or []Value when the
// elements are themselves arrays. Slices returned by File are shared: never
// modify them.
type Value struct {
	Type ValueType
	Elem ValueType // element type; only for arrays
	Data any
}

// Len returns the number of elements of an array value, 0 otherwise.
func (v Value) Len() int {
	switch d := v.Data.(type) {
	case []uint8:
		return len(d)
	case []int8:
		return len(d)
	case []uint16:
		return len(d)
	case []int16:
		return len(d)
	case []uint32:
		return len(d)
	case []int32:
		return len(d)
	case []float32:
		return len(d)
	case []bool:
		return len(d)
	case []string:
		return len(d)
	case []uint64:
		return len(d)
	case []int64:
		return len(d)
	case []float64:
		return len(d)
	case []Value:
		return len(d)
	}
	return 0
}

// asInt returns a scalar integer value widened to int64 (ok=false for
// non-integers and for a uint64 above MaxInt64). neg reports a negative value.
func asInt(d any) (int64, bool) {
	switch x := d.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// intsOf converts an integer array to []int64 (ok=false if it is not one, or
// holds a uint64 above MaxInt64).
func intsOf(d any) ([]int64, bool) {
	switch x := d.(type) {
	case []uint8:
		return widen(x), true
	case []int8:
		return widen(x), true
	case []uint16:
		return widen(x), true
	case []int16:
		return widen(x), true
	case []uint32:
		return widen(x), true
	case []int32:
		return widen(x), true
	case []int64:
		out := make([]int64, len(x))
		copy(out, x)
		return out, true
	case []uint64:
		out := make([]int64, len(x))
		for i, v := range x {
			if v > math.MaxInt64 {
				return nil, false
			}
			out[i] = int64(v)
		}
		return out, true
	}
	return nil, false
}

func widen[T uint8 | int8 | uint16 | int16 | uint32 | int32](x []T) []int64 {
	out := make([]int64, len(x))
	for i, v := range x {
		out[i] = int64(v)
	}
	return out
}
