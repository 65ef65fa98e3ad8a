package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"

	"stockpot/internal/gguf"
)

// Fingerprint identifies the numbers a model file computes.
type Fingerprint [32]byte

// String is the hex form, as shown by `stockpot model info` and /v1/models.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// Short is the first 12 hex digits, for logs.
func (f Fingerprint) Short() string { return f.String()[:12] }

// descriptiveKeys never change the numbers a model computes.
var descriptiveKeys = []string{
	"general.name", "general.author", "general.version", "general.organization", "general.basename",
	"general.finetune", "general.description", "general.quantized_by", "general.size_label",
	"general.license", "general.license.name", "general.license.link", "general.url", "general.doi",
	"general.uuid", "general.repo_url", "general.source.", "general.base_model.", "general.tags",
	"general.languages", "general.datasets", "general.dataset.", "general.quantization_version",
	"general.file_type",
}

// Numeric reports whether a metadata key can affect the numbers a model computes.
func Numeric(key string) bool {
	for _, d := range descriptiveKeys {
		if key == d || (strings.HasSuffix(d, ".") && strings.HasPrefix(key, d)) {
			return false
		}
	}
	return true
}

// chunkSize balances parallelism and per-chunk overhead; 4 MiB keeps ~250 chunks per GB.
const chunkSize = 4 << 20

// Compute fingerprints f: numeric metadata (sorted by key, typed), the tensor table (name,
// type, dims, in file order) and every tensor's bytes.
func Compute(f *gguf.File) (Fingerprint, error) {
	h := sha256.New()
	h.Write([]byte("stockpot-fingerprint-v1\x00"))
	keys := append([]string(nil), f.Keys()...)
	sort.Strings(keys)
	for _, k := range keys {
		if !Numeric(k) {
			continue
		}
		v, _ := f.Value(k)
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%#v\x00", k, v.Type, v.Elem, v.Data)
	}
	type chunk struct{ data []byte }
	var chunks []chunk
	for _, t := range f.Tensors() {
		fmt.Fprintf(h, "tensor\x00%s\x00%d\x00%v\x00", t.Name, uint32(t.Type), t.Dims)
		data, err := f.TensorData(t.Name)
		if err != nil {
			return Fingerprint{}, fmt.Errorf("identity: %w", err)
		}
		for off := 0; off < len(data); off += chunkSize {
			chunks = append(chunks, chunk{data[off:min(off+chunkSize, len(data))]})
		}
	}
	sums := make([][32]byte, len(chunks))
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), max(len(chunks), 1))
	next := make(chan int, len(chunks))
	for i := range chunks {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sums[i] = sha256.Sum256(chunks[i].data)
			}
		}()
	}
	wg.Wait()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(sums)))
	h.Write(n[:])
	for _, s := range sums {
		h.Write(s[:])
	}
	var fp Fingerprint
	copy(fp[:], h.Sum(nil))
	return fp, nil
}

// Descriptor is the cache identity: everything besides the token ids that shapes a K/V block.
type Descriptor struct {
	Model     Fingerprint
	Tokenizer [32]byte // tokenizer + chat template digest
	KVType    string   // "f32", "f16" or "q8_0"
	BlockSize int
	LoRA      string // adapter identity; "" for none
	// StateFormat names the layout of a hybrid model's recurrent-state checkpoints
	// (model.Config.StateFormat); "" for models without recurrent state. A checkpoint is
	// part of a cached block's value, so a change of its layout must never match.
	StateFormat string
}

// Bytes is the canonical encoding hashed into the root of every block hash chain.
func (d Descriptor) Bytes() []byte {
	var b []byte
	b = append(b, "stockpot-identity-v1\x00"...)
	b = append(b, d.Model[:]...)
	b = append(b, d.Tokenizer[:]...)
	b = append(b, d.KVType...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(d.BlockSize))
	b = append(b, d.LoRA...)
	b = append(b, 0)
	if d.StateFormat != "" {
		// Only when set, so the identities of models without state are unchanged.
		b = append(b, "state\x00"...)
		b = append(b, d.StateFormat...)
		b = append(b, 0)
	}
	return b
}

// Digest is SHA-256 of Bytes.
func (d Descriptor) Digest() [32]byte { return sha256.Sum256(d.Bytes()) }
