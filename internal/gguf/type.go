package gguf

import "fmt"

// Type is a ggml tensor type, as stored in a GGUF tensor descriptor.
type Type uint32

// The tensor types Stockpot computes with. The values are ggml's enum
// ggml_type and are fixed by the file format.
const (
	TypeF32  Type = 0
	TypeF16  Type = 1
	TypeQ4_0 Type = 2
	TypeQ5_0 Type = 6
	TypeQ8_0 Type = 8
	TypeQ4_K Type = 12
	TypeQ5_K Type = 13
	TypeQ6_K Type = 14
	TypeQ8_K Type = 15
	TypeBF16 Type = 30
)

// typeInfo is the layout of one supported type.
type typeInfo struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
}

// Block layouts (ggml-common.h):
//
//	Q4_0: f16 d + 16 bytes of 4-bit quants          = 18 bytes / 32
//	Q5_0: f16 d + 4 bytes of 5th bits + 16 nibbles  = 22 bytes / 32
//	Q8_0: f16 d + 32 int8                           = 34 bytes / 32
//	Q4_K: f16 d, f16 dmin, 12 bytes scales, 128 qs  = 144 bytes / 256
//	Q5_K: Q4_K's header, 32 bytes qh, 128 qs        = 176 bytes / 256
//	Q6_K: 128 ql, 64 qh, 16 int8 scales, f16 d      = 210 bytes / 256
//	Q8_K: f32 d, 256 int8, 16 int16 bsums           = 292 bytes / 256
//
// Indexed by Type so that lookups on hot paths are a bounds check and a load.
var typeInfos = [...]typeInfo{
	TypeF32:  {"F32", 1, 4},
	TypeF16:  {"F16", 1, 2},
	TypeQ4_0: {"Q4_0", 32, 18},
	TypeQ5_0: {"Q5_0", 32, 22},
	TypeQ8_0: {"Q8_0", 32, 34},
	TypeQ4_K: {"Q4_K", 256, 144},
	TypeQ5_K: {"Q5_K", 256, 176},
	TypeQ6_K: {"Q6_K", 256, 210},
	TypeQ8_K: {"Q8_K", 256, 292},
	TypeBF16: {"BF16", 1, 2},
}

// ggmlNames names the ggml types Stockpot does not support, so that an error
// about one says which type the file has.
var ggmlNames = map[Type]string{
	3: "Q4_1", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K",
	16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
	20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
	26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0",
	39: "MXFP4",
}

// String returns ggml's name for t ("Q8_0"), or "Type(N)" for an unknown value.
func (t Type) String() string {
	if t.Valid() {
		return typeInfos[t].name
	}
	if n, ok := ggmlNames[t]; ok {
		return n
	}
	return fmt.Sprintf("Type(%d)", uint32(t))
}

// Valid reports whether t is one of the supported types.
func (t Type) Valid() bool {
	return int(t) < len(typeInfos) && typeInfos[t].blockSize != 0
}

// BlockSize returns the number of elements per block: 1 for F32/F16/BF16,
// 32 for Q4_0/Q5_0/Q8_0, 256 for the K quants. It panics if t is not Valid.
func (t Type) BlockSize() int { return t.info().blockSize }

// BlockBytes returns the bytes per block. It panics if t is not Valid.
func (t Type) BlockBytes() int { return t.info().blockBytes }

// RowBytes returns the bytes taken by n elements. n must be a non-negative
// multiple of BlockSize; anything else is a programmer bug and panics.
func (t Type) RowBytes(n int) int {
	ti := t.info()
	if n < 0 || n%ti.blockSize != 0 {
		panic(fmt.Sprintf("gguf: %s row of %d elements is not a multiple of block size %d", t, n, ti.blockSize))
	}
	return n / ti.blockSize * ti.blockBytes
}

func (t Type) info() typeInfo {
	if !t.Valid() {
		panic(fmt.Sprintf("gguf: unsupported tensor type %s", t))
	}
	return typeInfos[t]
}
