package tokenizer

// MergeWork is what EncodeCounted counted: the characters merges started from and the
// heap updates they made.
type MergeWork struct{ Chars, HeapOps int }

// EncodeCounted is EncodeLimit that also counts the merges' work, for the tests that check
// it is linear in the text.
func (t *Tokenizer) EncodeCounted(text string, limit int) ([]int32, bool, MergeWork) {
	var st mergeStats
	out, ok := t.encode(text, false, false, limit, &st)
	return out, ok, MergeWork{Chars: st.chars, HeapOps: st.heapOps}
}
