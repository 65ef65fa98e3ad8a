package vocab

import (
	"unicode"
	"unicode/utf8"
)

// Pre names a pre-tokenizer: how text is cut into words before BPE merges.
// The names are llama.cpp's tokenizer.ggml.pre values; the splitting here is
// a hand-written approximation of the regular expressions llama.cpp uses for
// them. It only has to be close: a merge learnt across a boundary that
// llama.cpp never crosses wastes a vocabulary slot but breaks nothing.
type Pre string

const (
	// PreLlama3 is Llama 3's split: letters with one leading non-letter,
	// digit runs of 1 to 3, punctuation runs, newline runs.
	PreLlama3 Pre = "llama-bpe"
	// PreQwen2 is PreLlama3 with every digit on its own.
	PreQwen2 Pre = "qwen2"
	// PreQwen35 is Qwen3.5's: PreQwen2 with combining marks inside letter
	// runs. Training splits it as PreQwen2 (the corpus' marks are rare).
	PreQwen35 Pre = "qwen35"
	// PreSmolLM is GPT-2's split (" ?letters", " ?punctuation") with every
	// digit on its own.
	PreSmolLM Pre = "smollm"
	// PreKimiK2 is Kimi-K2's (and Kimi-K3's) split: like PreLlama3 (digit
	// runs of 1 to 3) but with Han runs and cased words apart. Training
	// splits it as PreLlama3 (the corpus has few Han runs).
	PreKimiK2 Pre = "kimi-k2"
)

func (p Pre) valid() bool {
	return p == PreLlama3 || p == PreQwen2 || p == PreQwen35 || p == PreSmolLM || p == PreKimiK2
}

func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }
func isSpace(r rune) bool  { return unicode.IsSpace(r) }
func isCRLF(r rune) bool   { return r == '\r' || r == '\n' }

// pretokenize calls emit for each word of text, in order; the words
// concatenate back to text.
func pretokenize(p Pre, text string, emit func(word string)) {
	runes := []rune(text)
	offs := make([]int, len(runes)+1) // byte offset of each rune
	o := 0
	for i, r := range runes {
		offs[i] = o
		o += utf8.RuneLen(r)
	}
	offs[len(runes)] = o
	n := len(runes)
	at := func(i int) rune {
		if i < n {
			return runes[i]
		}
		return -1
	}
	llama := p != PreSmolLM
	maxDigits := 1
	if p == PreLlama3 || p == PreKimiK2 {
		maxDigits = 3
	}
	for i := 0; i < n; {
		j := matchWord(runes, i, llama, maxDigits, at)
		emit(text[offs[i]:offs[j]])
		i = j
	}
}

// matchWord returns the end of the word that starts at rune i (> i).
func matchWord(runes []rune, i int, llama bool, maxDigits int, at func(int) rune) int {
	n := len(runes)
	c := runes[i]
	// Contractions: 's 't 're 've 'm 'll 'd (any case for llama).
	if c == '\'' {
		lower := func(r rune) rune {
			if llama {
				return unicode.ToLower(r)
			}
			return r
		}
		a, b := lower(at(i+1)), lower(at(i+2))
		switch {
		case a == 's' || a == 't' || a == 'm' || a == 'd':
			return i + 2
		case (a == 'r' || a == 'v') && b == 'e', a == 'l' && b == 'l':
			return i + 3
		}
	}
	letters := func(j int) int {
		for j < n && isLetter(runes[j]) {
			j++
		}
		return j
	}
	if llama {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if isLetter(c) {
			return letters(i + 1)
		}
		if !isCRLF(c) && !isNumber(c) && isLetter(at(i+1)) {
			return letters(i + 2)
		}
		// \p{N}{1,max}
		if isNumber(c) {
			j := i + 1
			for j < n && j-i < maxDigits && isNumber(runes[j]) {
				j++
			}
			return j
		}
		// " ?[^\s\p{L}\p{N}]+[\r\n]*"
		j := i
		if c == ' ' {
			j++
		}
		if p := at(j); p >= 0 && !isSpace(p) && !isLetter(p) && !isNumber(p) {
			for j < n && !isSpace(runes[j]) && !isLetter(runes[j]) && !isNumber(runes[j]) {
				j++
			}
			for j < n && isCRLF(runes[j]) {
				j++
			}
			return j
		}
		// \s*[\r\n]+
		j = i
		lastNL := -1
		for j < n && isSpace(runes[j]) {
			if isCRLF(runes[j]) {
				lastNL = j
			}
			j++
		}
		if lastNL >= 0 {
			return lastNL + 1
		}
		return spaceRun(i, j, n)
	}
	// GPT-2: digits alone, then " ?\p{L}+", " ?[^\s\p{L}\p{N}]+", spaces.
	if isNumber(c) {
		return i + 1
	}
	j := i
	if c == ' ' {
		j++
	}
	if p := at(j); p >= 0 && isLetter(p) {
		return letters(j + 1)
	}
	if p := at(j); p >= 0 && !isSpace(p) && !isNumber(p) {
		for j < n && !isSpace(runes[j]) && !isLetter(runes[j]) && !isNumber(runes[j]) {
			j++
		}
		return j
	}
	j = i
	for j < n && isSpace(runes[j]) {
		j++
	}
	if j == i { // cannot happen: every rune is a letter, number, space or other
		return i + 1
	}
	return spaceRun(i, j, n)
}

// spaceRun applies "\s+(?!\S)|\s+" to the whitespace run [i, j): leave the
// last space to prefix the next word unless the run ends the text.
func spaceRun(i, j, n int) int {
	if j == n || j-i == 1 {
		return j
	}
	return j - 1
}
