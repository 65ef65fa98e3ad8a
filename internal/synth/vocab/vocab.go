package vocab

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// TokenType is llama.cpp's token type (tokenizer.ggml.token_type values).
type TokenType int32

const (
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// Special is a token added around the trained ones.
type Special struct {
	Text string
	Type TokenType // TypeControl or TypeUserDefined
}

// Vocab is a trained vocabulary in the shape GGUF stores it. Treat it as
// read-only: trained vocabularies are cached and shared.
type Vocab struct {
	Model  string      // tokenizer.ggml.model: "gpt2" or "llama"
	Pre    Pre         // tokenizer.ggml.pre; empty for SPM
	Tokens []string    // id -> text (byte-level spelling for gpt2, "▁" for space in SPM)
	Scores []float32   // SPM only: merged pieces -rank, characters below every merge
	Types  []TokenType // id -> type
	Merges []string    // gpt2 only: "left right" in rank order
}

// ID returns the id of the token with this exact text.
func (v *Vocab) ID(text string) (int, bool) {
	for i, t := range v.Tokens {
		if t == text {
			return i, true
		}
	}
	return 0, false
}

// maxPieceBytes bounds the length of a learnt token. The generated corpus
// repeats phrases; without a bound BPE would spend slots on whole clauses.
const maxPieceBytes = 24

// BPEConfig describes a byte-level BPE vocabulary.
type BPEConfig struct {
	Pre  Pre
	Size int // total tokens: 256 bytes + merges + specials
	// Specials are placed at ids 0.. when SpecialsFirst (SmolLM), after the
	// trained tokens otherwise (Llama 3, Qwen).
	Specials      []Special
	SpecialsFirst bool
}

// TrainBPE trains a byte-level BPE vocabulary on Corpus.
func TrainBPE(cfg BPEConfig) (*Vocab, error) {
	if !cfg.Pre.valid() {
		return nil, fmt.Errorf("vocab: unknown pre-tokenizer %q", cfg.Pre)
	}
	if min := 256 + len(cfg.Specials); cfg.Size < min {
		return nil, fmt.Errorf("vocab: size %d is below the %d bytes and specials", cfg.Size, min)
	}
	// Ids while training: the 256 bytes in GPT-2 order, then merges.
	// Specials are reserved texts and get their ids at the end.
	strs := make([]string, 0, cfg.Size)
	index := make(map[string]int32, cfg.Size)
	var byteID [256]int32
	for i, b := range byteOrder {
		byteID[b] = int32(i)
		s := string(byteToRune[b])
		strs = append(strs, s)
		index[s] = int32(i)
	}
	for _, s := range cfg.Specials {
		index[s.Text] = -1 // reserved; never learnt
	}
	wordCounts := make(map[string]int64)
	pretokenize(cfg.Pre, Corpus(), func(w string) { wordCounts[w]++ })
	words := sortedWords(wordCounts, func(w string) []int32 {
		syms := make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			syms[i] = byteID[w[i]]
		}
		return syms
	})
	merges := learnMerges(words, &strs, index, map[int32]bool{}, cfg.Size-len(cfg.Specials), maxPieceBytes)

	v := &Vocab{Model: "gpt2", Pre: cfg.Pre}
	if cfg.SpecialsFirst {
		for _, s := range cfg.Specials {
			v.Tokens = append(v.Tokens, s.Text)
			v.Types = append(v.Types, s.Type)
		}
	}
	for _, s := range strs {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, TypeNormal)
	}
	if !cfg.SpecialsFirst {
		for _, s := range cfg.Specials {
			v.Tokens = append(v.Tokens, s.Text)
			v.Types = append(v.Types, s.Type)
		}
	}
	v.Merges = make([]string, len(merges))
	for i, m := range merges {
		v.Merges[i] = strs[m.a] + " " + strs[m.b]
	}
	return v, nil
}

// sortedWords turns word counts into words in a fixed order (count
// descending, then text) so that nothing depends on map order.
func sortedWords(counts map[string]int64, syms func(string) []int32) []word {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	words := make([]word, 0, len(keys))
	for _, k := range keys {
		if s := syms(k); len(s) > 0 {
			words = append(words, word{s, counts[k]})
		}
	}
	return words
}

// SPMConfig describes a SentencePiece-style vocabulary.
type SPMConfig struct {
	Size int // total tokens: 3 specials + 256 bytes + characters + merges
	// Coverage is the fraction of character occurrences the kept alphabet
	// must cover (SentencePiece's character_coverage); the rest are left to
	// byte fallback. 0 means 0.9995.
	Coverage float64
}

// SPM special ids, fixed by the Llama 2 convention llama.cpp defaults to.
const (
	SPMUnknown = 0
	SPMBOS     = 1
	SPMEOS     = 2
)

const spmSpace = "▁"

// TrainSPM trains a SentencePiece-style BPE vocabulary on Corpus.
//
// Layout: <unk> <s> </s>, then <0x00>..<0xFF> (type Byte), then the merged
// pieces in rank order with score -rank, then the alphabet characters with
// scores below every merge. Sentences are lines; each gets a leading "▁",
// spaces become "▁" and a word starts at every "▁" (SentencePiece's
// whitespace split). Characters outside the alphabet and control characters
// cut words: no piece contains them, so they reach llama.cpp's byte fallback.
func TrainSPM(cfg SPMConfig) (*Vocab, error) {
	v, _, err := trainSPM(cfg)
	return v, err
}

// trainSPM also returns the learnt merges as (left, right) texts in rank
// order, for tests that replay them.
func trainSPM(cfg SPMConfig) (*Vocab, [][2]string, error) {
	cov := cfg.Coverage
	if cov == 0 {
		cov = 0.9995
	}
	const fixed = 3 + 256
	if cfg.Size <= fixed+1 {
		return nil, nil, fmt.Errorf("vocab: SPM size %d leaves no room after %d specials and bytes", cfg.Size, fixed)
	}
	var lines []string
	for _, l := range strings.Split(Corpus(), "\n") {
		if l = strings.TrimRight(l, " \t\r"); l != "" {
			lines = append(lines, spmSpace+strings.ReplaceAll(l, " ", spmSpace))
		}
	}
	// Alphabet: characters by count (then code point) until coverage.
	charCount := make(map[rune]int64)
	var total int64
	for _, l := range lines {
		for _, r := range l {
			if r >= 0x20 && r != 0x7f {
				charCount[r]++
				total++
			}
		}
	}
	chars := make([]rune, 0, len(charCount))
	for r := range charCount {
		chars = append(chars, r)
	}
	sort.Slice(chars, func(i, j int) bool {
		if charCount[chars[i]] != charCount[chars[j]] {
			return charCount[chars[i]] > charCount[chars[j]]
		}
		return chars[i] < chars[j]
	})
	maxChars := (cfg.Size - fixed) / 3 // leave at least two thirds for merges
	var covered int64
	keep := 0
	for keep < len(chars) && keep < maxChars && float64(covered) < cov*float64(total) {
		covered += charCount[chars[keep]]
		keep++
	}
	chars = chars[:keep]

	// Training ids: the alphabet first (in the order above), then merges.
	strs := make([]string, 0, cfg.Size)
	index := make(map[string]int32, cfg.Size)
	charID := make(map[rune]int32, len(chars))
	for i, r := range chars {
		charID[r] = int32(i)
		strs = append(strs, string(r))
		index[string(r)] = int32(i)
	}
	reserved := []string{"<unk>", "<s>", "</s>"}
	for b := 0; b < 256; b++ {
		reserved = append(reserved, fmt.Sprintf("<0x%02X>", b))
	}
	for _, s := range reserved {
		index[s] = -1
	}
	wordCounts := make(map[string]int64)
	for _, l := range lines {
		start := 0
		flush := func(end int) {
			if end > start {
				wordCounts[l[start:end]]++
			}
		}
		for i, r := range l {
			if _, ok := charID[r]; !ok {
				flush(i)
				start = i + utf8.RuneLen(r)
				continue
			}
			if r == '▁' && i > start {
				flush(i)
				start = i
			}
		}
		flush(len(l))
	}
	words := sortedWords(wordCounts, func(w string) []int32 {
		syms := make([]int32, 0, len(w))
		for _, r := range w {
			syms = append(syms, charID[r])
		}
		return syms
	})
	learnt := make(map[int32]bool)
	merges := learnMerges(words, &strs, index, learnt, cfg.Size-fixed, maxPieceBytes)

	v := &Vocab{Model: "llama"}
	add := func(text string, score float32, t TokenType) {
		v.Tokens = append(v.Tokens, text)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, t)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, TypeByte)
	}
	rank := 0
	for _, m := range merges {
		if int(m.out) >= len(chars) && strs[m.out] != "" && learnt[m.out] {
			add(strs[m.out], -float32(rank), TypeNormal)
			learnt[m.out] = false // a text spelled by two merges is added once, at its first rank
			rank++
		}
	}
	for i, r := range chars {
		add(string(r), -float32(rank+i), TypeNormal)
	}
	pairs := make([][2]string, len(merges))
	for i, m := range merges {
		pairs[i] = [2]string{strs[m.a], strs[m.b]}
	}
	return v, pairs, nil
}
