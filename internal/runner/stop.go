package runner

import "strings"

// stopFilter finds stop strings in text that arrives in pieces.
//
// It holds back the longest suffix of the text seen so far that is a proper prefix of some stop
// string, since the next piece may complete it; everything before that suffix is safe to emit.
// Any occurrence of a stop string therefore starts at or after the held suffix, so searching
// held+piece finds the earliest occurrence, and the output is cut right before it.
//
// Held text always starts at a character boundary: it equals a prefix of a stop string, which is
// valid UTF-8, and a valid prefix starts with a leading byte.
type stopFilter struct {
	stops []string
	held  string
}

// push adds piece and returns the text that can be emitted now. hit reports that a stop string
// was found: emit is then the text before it and the filter must not be used again.
func (f *stopFilter) push(piece string) (emit string, hit bool) {
	if len(f.stops) == 0 {
		return piece, false
	}
	buf := f.held + piece
	cut := -1
	for _, s := range f.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		f.held = ""
		return buf[:cut], true
	}
	keep := 0
	for _, s := range f.stops {
		// Longest k < len(s) with buf ending in s[:k]; never longer than buf.
		for k := min(len(s)-1, len(buf)); k > keep; k-- {
			if strings.HasSuffix(buf, s[:k]) {
				keep = k
				break
			}
		}
	}
	f.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// flush returns the held text at the end of generation (it was not a stop string).
func (f *stopFilter) flush() string {
	h := f.held
	f.held = ""
	return h
}
