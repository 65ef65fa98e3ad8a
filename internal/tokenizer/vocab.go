package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Token types as stored in tokenizer.ggml.token_type (llama_token_type).
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Token attributes (llama_token_attr), derived from the types and from
// llama.cpp's by-text fix-ups in New.
const (
	attrUnknown     uint16 = 1 << 0
	attrUnused      uint16 = 1 << 1
	attrNormal      uint16 = 1 << 2
	attrControl     uint16 = 1 << 3
	attrUserDefined uint16 = 1 << 4
	attrByte        uint16 = 1 << 5
)

// NoToken is the id of an absent special token (LLAMA_TOKEN_NULL).
const NoToken int32 = -1

// OptionalID is a special-token id that may be absent from the metadata.
// When absent, llama.cpp's default for the vocabulary kind applies.
type OptionalID struct {
	ID  int32
	Set bool
}

// ID returns a present OptionalID.
func ID(id int32) OptionalID { return OptionalID{ID: id, Set: true} }

// OptionalBool is a flag that may be absent from the metadata.
type OptionalBool struct {
	Value bool
	Set   bool
}

// Bool returns a present OptionalBool.
func Bool(b bool) OptionalBool { return OptionalBool{Value: b, Set: true} }

// Vocab mirrors the tokenizer.ggml.* metadata keys. Absent keys are nil
// slices or unset optionals; New applies llama.cpp's defaults for them.
type Vocab struct {
	Model  string    // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	Pre    string    // tokenizer.ggml.pre; "" means absent ("default")
	Tokens []string  // tokenizer.ggml.tokens
	Scores []float32 // tokenizer.ggml.scores; nil: all 0
	Types  []int32   // tokenizer.ggml.token_type; nil: all normal
	Merges []string  // tokenizer.ggml.merges, "left right", rank = index; required for gpt2

	BOS, EOS, UNK, PAD, EOT, EOM OptionalID

	AddBOS, AddEOS, AddSpacePrefix OptionalBool

	ChatTemplate string // tokenizer.chat_template; "" if absent
	// ChatTemplates are the named templates, tokenizer.chat_template.<name>
	// ("tool_use" and the names listed in tokenizer.chat_templates).
	ChatTemplates map[string]string
}

// Kind is the tokenization algorithm.
type Kind int

const (
	KindSPM Kind = iota // SentencePiece-style: score-ordered bigram merges, byte fallback
	KindBPE             // byte-level BPE: pre-tokenizer regex, rank-ordered merges
)

func (k Kind) String() string {
	if k == KindSPM {
		return "spm"
	}
	return "bpe"
}

// ErrVocab is wrapped by every error New returns for unusable metadata.
var ErrVocab = errors.New("tokenizer: invalid vocabulary")

// Tokenizer turns text into token ids and back, as llama.cpp does for the
// same GGUF metadata. It is immutable after New and safe for concurrent use.
type Tokenizer struct {
	kind   Kind
	pre    preType
	tokens []string  // id -> text; empty texts replaced by "[EMPTY_<id>]" as llama.cpp does
	scores []float32 // id -> score
	attrs  []uint16  // id -> attributes
	toID   map[string]int32
	ranks  map[mergePair]int32 // byte-level BPE merge ranks; first occurrence wins

	bos, eos, unk, pad, eot, eom int32 // NoToken when absent

	addBOS, addEOS, addSpacePrefix bool
	ignoreMerges                   bool // llama3: a word that is a whole token skips merging
	cleanSpaces                    bool // llama_detokenize's clean-up passes (not used by Decode)

	eog     map[int32]bool
	special []int32  // control/user-defined/unknown ids, longest text first (tokenizer_st_partition order)
	pieces  [][]byte // id -> piece rendered with special=true (control texts kept)

	chatTemplate  string
	chatTemplates map[string]string // tokenizer.chat_template.<name>
	template      compiledTemplate  // compiled on first use, by name
	tokenBytes    tokenBytesBound   // computed on first MaxTokenBytes
	digest        [32]byte
}

type mergePair struct{ left, right string }

// New builds a tokenizer from vocabulary metadata. It fails (wrapping
// ErrVocab) where llama.cpp would refuse to load the vocabulary, and for
// pre-tokenizers this package does not implement.
func New(v Vocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrVocab)
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d tokens", ErrVocab, n)
	}
	if v.Scores != nil && len(v.Scores) < n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrVocab, len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) < n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrVocab, len(v.Types), n)
	}
	t := &Tokenizer{
		tokens:       make([]string, n),
		scores:       make([]float32, n),
		attrs:        make([]uint16, n),
		toID:         make(map[string]int32, n),
		eot:          NoToken,
		eom:          NoToken,
		pad:          NoToken,
		chatTemplate: v.ChatTemplate,
	}
	for name, src := range v.ChatTemplates {
		if t.chatTemplates == nil {
			t.chatTemplates = make(map[string]string, len(v.ChatTemplates))
		}
		t.chatTemplates[name] = src
	}
	switch v.Model {
	case "llama":
		t.kind = KindSPM
		t.bos, t.eos, t.unk = 1, 2, 0
		t.addBOS, t.addSpacePrefix = true, true
	case "gpt2":
		t.kind = KindBPE
		t.bos, t.eos, t.unk = 11, 11, NoToken
		if v.Merges == nil {
			return nil, fmt.Errorf("%w: gpt2 vocabulary without tokenizer.ggml.merges", ErrVocab)
		}
		pt, ignore, addBOS, clean, ok := preTypeFor(v.Pre)
		if !ok {
			return nil, fmt.Errorf("%w: unsupported pre-tokenizer %q", ErrVocab, v.Pre)
		}
		t.pre, t.ignoreMerges, t.addBOS, t.cleanSpaces = pt, ignore, addBOS, clean
		t.ranks = make(map[mergePair]int32, len(v.Merges))
		for i, m := range v.Merges {
			var p mergePair
			// llama.cpp splits at the first space after the first byte; a
			// merge without one becomes the pair ("", "").
			if j := indexByteFrom(m, ' ', 1); j >= 0 {
				p = mergePair{m[:j], m[j+1:]}
			}
			if _, dup := t.ranks[p]; !dup {
				t.ranks[p] = int32(i)
			}
		}
	default:
		return nil, fmt.Errorf("%w: unsupported tokenizer model %q", ErrVocab, v.Model)
	}
	if v.AddSpacePrefix.Set {
		t.addSpacePrefix = v.AddSpacePrefix.Value
	}

	for i, s := range v.Tokens {
		if s == "" {
			s = fmt.Sprintf("[EMPTY_%d]", i)
		}
		if _, dup := t.toID[s]; dup {
			return nil, fmt.Errorf("%w: token %d %q duplicates token %d", ErrVocab, i, s, t.toID[s])
		}
		t.toID[s] = int32(i)
		t.tokens[i] = s
		if v.Scores != nil {
			t.scores[i] = v.Scores[i]
		}
		t.attrs[i] = attrNormal
		if v.Types != nil {
			t.attrs[i] = attrFromType(v.Types[i])
		}
	}

	// Special ids: defaults that fall outside the vocabulary are dropped; a
	// key that falls outside keeps the default (llama.cpp warns).
	for _, s := range []struct {
		dst *int32
		opt OptionalID
	}{{&t.bos, v.BOS}, {&t.eos, v.EOS}, {&t.unk, v.UNK}, {&t.pad, v.PAD}, {&t.eot, v.EOT}, {&t.eom, v.EOM}} {
		if *s.dst >= int32(n) {
			*s.dst = NoToken
		}
		if s.opt.Set && s.opt.ID >= 0 && s.opt.ID < int32(n) {
			*s.dst = s.opt.ID
		}
	}
	if v.AddBOS.Set {
		t.addBOS = v.AddBOS.Value
	}
	if v.AddEOS.Set {
		t.addEOS = v.AddEOS.Value
	}
	if t.addBOS && t.bos == NoToken {
		return nil, fmt.Errorf("%w: add_bos is set but there is no BOS token", ErrVocab)
	}
	if t.addEOS && t.eos == NoToken {
		return nil, fmt.Errorf("%w: add_eos is set but there is no EOS token", ErrVocab)
	}

	t.detectSpecial()
	t.buildSpecialCache()
	t.pieces = make([][]byte, n)
	for id := range t.pieces {
		t.pieces[id] = t.renderPiece(int32(id))
	}
	t.digest = t.computeDigest(v)
	return t, nil
}

func indexByteFrom(s string, c byte, from int) int {
	for i := from; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func attrFromType(ty int32) uint16 {
	switch ty {
	case TypeNormal:
		return attrNormal
	case TypeUnknown:
		return attrUnknown
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDefined
	case TypeUnused:
		return attrUnused
	case TypeByte:
		return attrByte
	}
	return 0
}

// Texts llama.cpp recognises (llama-vocab.cpp, load). Tokens found by text
// are forced to control type, which changes how they partition and decode.
var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepTexts = []string{"<|file_sep|>"}
	eogTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
		"<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
		"[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
		"<｜end▁of▁sentence｜>", "[e~["}
)

// detectSpecial applies llama.cpp's by-text detection of EOT/EOM/FIM tokens
// and builds the end-of-generation set. Where llama.cpp walks a hash map (so
// the winner among several candidates is unspecified) we take the lowest id.
func (t *Tokenizer) detectSpecial() {
	byText := func(texts []string) int32 {
		best := NoToken
		for _, s := range texts {
			if id, ok := t.toID[s]; ok && (best == NoToken || id < best) {
				best = id
			}
		}
		if best != NoToken {
			t.attrs[best] |= attrControl
		}
		return best
	}
	if t.eot == NoToken {
		t.eot = byText(eotTexts)
	}
	if t.eom == NoToken {
		t.eom = byText(eomTexts)
	}
	var fim [6]int32
	for i, texts := range [][]string{fimPreTexts, fimSufTexts, fimMidTexts, fimPadTexts, fimRepTexts, fimSepTexts} {
		fim[i] = byText(texts)
	}
	t.eog = make(map[int32]bool)
	for _, id := range fim[3:] { // pad, rep, sep
		if id != NoToken {
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.toID[s]; ok {
			t.eog[id] = true
			t.attrs[id] |= attrControl
		}
	}
	// gpt-oss: these are always rendered.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.toID[s]; ok {
			t.attrs[id] = attrUserDefined
		}
	}
	for _, id := range []int32{t.eos, t.eot, t.eom} {
		if id != NoToken {
			t.eog[id] = true
		}
	}
	has := func(s string) (int32, bool) {
		id, ok := t.toID[s]
		return id, ok && t.eog[id]
	}
	_, ret := has("<|return|>")
	_, call := has("<|call|>")
	_, calls := has("<|calls|>")
	_, flush := has("<|flush|>")
	if end, ok := has("<|end|>"); ok && ((ret && (call || calls)) || ((call || calls) && flush)) {
		delete(t.eog, end)
		t.attrs[end] = attrUserDefined
	}
	if s, ok := has("</s>"); ok {
		if _, tr := has("<|tool_response>"); tr {
			delete(t.eog, s)
			t.attrs[s] = attrNormal
		}
	}
}

// buildSpecialCache lists the tokens tokenizer_st_partition matches in raw
// text, longest first. llama.cpp's sort is unstable; ties keep id order here.
func (t *Tokenizer) buildSpecialCache() {
	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
		}
	}
	slices.SortStableFunc(t.special, func(a, b int32) int {
		return len(t.tokens[b]) - len(t.tokens[a])
	})
}

// computeDigest hashes everything that decides token ids, the text a token
// renders to, or the chat prompt.
func (t *Tokenizer) computeDigest(v Vocab) [32]byte {
	h := sha256.New()
	var buf []byte
	str := func(s string) {
		buf = binary.LittleEndian.AppendUint64(buf[:0], uint64(len(s)))
		h.Write(buf)
		h.Write([]byte(s))
	}
	num := func(x uint64) {
		buf = binary.LittleEndian.AppendUint64(buf[:0], x)
		h.Write(buf)
	}
	str("stockpot-tokenizer-v1")
	str(v.Model)
	str(v.Pre)
	num(uint64(len(t.tokens)))
	for id, s := range t.tokens {
		str(s)
		num(uint64(math.Float32bits(t.scores[id])))
		num(uint64(t.attrs[id]))
	}
	num(uint64(len(v.Merges)))
	for _, m := range v.Merges {
		str(m)
	}
	for _, id := range []int32{t.bos, t.eos, t.unk, t.pad, t.eot, t.eom} {
		num(uint64(uint32(id)))
	}
	flags := uint64(0)
	for i, b := range []bool{t.addBOS, t.addEOS, t.addSpacePrefix, t.ignoreMerges, t.cleanSpaces} {
		if b {
			flags |= 1 << i
		}
	}
	num(flags)
	str(t.chatTemplate)
	// Named templates only when there are some, so that digests of models
	// without them stay what they were.
	if len(t.chatTemplates) > 0 {
		names := make([]string, 0, len(t.chatTemplates))
		for n := range t.chatTemplates {
			names = append(names, n)
		}
		slices.Sort(names)
		num(uint64(len(names)))
		for _, n := range names {
			str(n)
			str(t.chatTemplates[n])
		}
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Kind reports the tokenization algorithm.
func (t *Tokenizer) Kind() Kind { return t.kind }

// VocabSize is the number of token ids.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS is the beginning-of-sequence id, or NoToken.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, or NoToken.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT is the end-of-turn id (from metadata or detected by text), or NoToken.
func (t *Tokenizer) EOT() int32 { return t.eot }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// IsEOG reports whether id ends generation (llama_vocab_is_eog).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// EOGs returns the end-of-generation ids in increasing order.
func (t *Tokenizer) EOGs() []int32 {
	out := make([]int32, 0, len(t.eog))
	for id := range t.eog {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// IsControl reports whether id is a control or unknown token, which Decode
// renders as nothing.
func (t *Tokenizer) IsControl(id int32) bool {
	return t.valid(id) && t.attrs[id]&(attrControl|attrUnknown) != 0
}

// Token returns the vocabulary text of id ("" when out of range).
func (t *Tokenizer) Token(id int32) string {
	if !t.valid(id) {
		return ""
	}
	return t.tokens[id]
}

// TokenID returns the id whose vocabulary text is exactly s.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	id, ok := t.toID[s]
	return id, ok
}

// ChatTemplate is the template from the metadata ("" if none).
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// Digest is a SHA-256 over everything that changes token ids, decoded text
// or the chat template. Two tokenizers with equal digests behave the same.
func (t *Tokenizer) Digest() [32]byte { return t.digest }

func (t *Tokenizer) valid(id int32) bool { return id >= 0 && int(id) < len(t.tokens) }
