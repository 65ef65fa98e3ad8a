package vocab

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/digests.txt")

// configs are the vocabularies the synth presets train.
var configs = []struct {
	name string
	bpe  *BPEConfig
	spm  *SPMConfig
}{
	{"spm-1000", nil, &SPMConfig{Size: 1000}},
	{"llama3-1500", &BPEConfig{Pre: PreLlama3, Size: 1500, Specials: []Special{{"<|begin_of_text|>", TypeControl}, {"<|eot_id|>", TypeControl}}}, nil},
	{"qwen2-1500", &BPEConfig{Pre: PreQwen2, Size: 1500, Specials: []Special{{"<|endoftext|>", TypeControl}, {"<think>", TypeUserDefined}}}, nil},
	{"smollm-4096", &BPEConfig{Pre: PreSmolLM, Size: 4096, Specials: []Special{{"<|endoftext|>", TypeControl}}, SpecialsFirst: true}, nil},
}

var trained = map[int]*Vocab{} // tests run sequentially

func train(t *testing.T, i int) *Vocab {
	t.Helper()
	if v := trained[i]; v != nil {
		return v
	}
	v := trainUncached(t, i)
	trained[i] = v
	return v
}

func trainUncached(t *testing.T, i int) *Vocab {
	t.Helper()
	c := configs[i]
	var v *Vocab
	var err error
	if c.bpe != nil {
		v, err = TrainBPE(*c.bpe)
	} else {
		v, err = TrainSPM(*c.spm)
	}
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return v
}

// digest hashes every field of v, so a change anywhere shows.
func digest(v *Vocab) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", v.Model, v.Pre, len(v.Tokens))
	for i, tok := range v.Tokens {
		h.Write([]byte(tok))
		binary.Write(h, binary.LittleEndian, int32(v.Types[i]))
		if v.Scores != nil {
			binary.Write(h, binary.LittleEndian, math.Float32bits(v.Scores[i]))
		}
		h.Write([]byte{0})
	}
	for _, m := range v.Merges {
		h.Write([]byte(m + "\x00"))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestGoldenDigests pins the trained vocabularies: token ids are part of
// every synthetic model and of tests elsewhere that name token ids. A
// deliberate change to the corpus or trainer is recorded with -update.
func TestGoldenDigests(t *testing.T) {
	var lines []string
	for i, c := range configs {
		a := train(t, i)
		if i == 1 { // the digest file checks runs against each other; this checks within one
			if da, db := digest(a), digest(trainUncached(t, i)); da != db {
				t.Fatalf("%s: two trainings differ: %s vs %s", c.name, da, db)
			}
		}
		lines = append(lines, c.name+" "+digest(a))
	}
	got := strings.Join(lines, "\n") + "\n"
	const path = "testdata/digests.txt"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("vocabulary digests changed (run with -update if intended):\nhave\n%swant\n%s", got, want)
	}
}

func TestBPEShape(t *testing.T) {
	for i, c := range configs {
		if c.bpe == nil {
			continue
		}
		v := train(t, i)
		if len(v.Tokens) != c.bpe.Size || len(v.Types) != len(v.Tokens) || v.Scores != nil {
			t.Fatalf("%s: %d tokens, %d types, scores %v; want %d", c.name, len(v.Tokens), len(v.Types), v.Scores != nil, c.bpe.Size)
		}
		ids := map[string]int{}
		for id, tok := range v.Tokens {
			if _, dup := ids[tok]; dup {
				t.Fatalf("%s: token %q twice", c.name, tok)
			}
			ids[tok] = id
		}
		for b := 0; b < 256; b++ {
			if _, ok := ids[string(byteToRune[b])]; !ok {
				t.Errorf("%s: byte %#x has no token", c.name, b)
			}
		}
		// Every merge joins two tokens into a token: what llama.cpp's BPE
		// needs to reach every learnt token.
		for r, m := range v.Merges {
			a, b, ok := strings.Cut(m, " ")
			_, okA := ids[a]
			_, okB := ids[b]
			_, okAB := ids[a+b]
			if !ok || !okA || !okB || !okAB || strings.Contains(b, " ") {
				t.Fatalf("%s: merge %d %q is not token+token=token", c.name, r, m)
			}
		}
		specialAt := 0
		if !c.bpe.SpecialsFirst {
			specialAt = len(v.Tokens) - len(c.bpe.Specials)
		}
		for j, s := range c.bpe.Specials {
			if v.Tokens[specialAt+j] != s.Text || v.Types[specialAt+j] != s.Type {
				t.Errorf("%s: special %q not at %d", c.name, s.Text, specialAt+j)
			}
		}
	}
}

// TestSPMReplay checks the point of the scores: llama.cpp's SPM tokenizer
// (merge the adjacent pair whose concatenation is a piece with the highest
// score, leftmost first) segments training words the way the training
// merges, replayed in rank order, do.
func TestSPMReplay(t *testing.T) {
	v, merges, err := trainSPM(*configs[0].spm)
	if err != nil {
		t.Fatal(err)
	}
	if v.Tokens[SPMUnknown] != "<unk>" || v.Tokens[SPMBOS] != "<s>" || v.Tokens[SPMEOS] != "</s>" {
		t.Fatalf("specials %q", v.Tokens[:3])
	}
	for b := 0; b < 256; b++ {
		if want := fmt.Sprintf("<0x%02X>", b); v.Tokens[3+b] != want || v.Types[3+b] != TypeByte {
			t.Fatalf("token %d = %q type %d, want %q byte", 3+b, v.Tokens[3+b], v.Types[3+b], want)
		}
	}
	score := map[string]float32{}
	for i, tok := range v.Tokens {
		if v.Types[i] == TypeNormal {
			if _, dup := score[tok]; dup {
				t.Fatalf("piece %q twice", tok)
			}
			score[tok] = v.Scores[i]
		}
	}
	if _, ok := score[spmSpace]; !ok {
		t.Fatal("no ▁ piece")
	}
	words := []string{"▁the", "▁function", "▁returns", "▁Hello", "▁tokenizer", "▁unmarshaling", "▁interface{}", "▁2024-01-15", "▁don't"}
	for _, l := range strings.Split(Corpus()[:30000], "\n") {
		for _, w := range strings.Fields(l) {
			words = append(words, spmSpace+w)
		}
	}
	mismatches := 0
	for _, w := range words {
		got, want := spmByScore(w, score), spmByRank(w, merges)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			mismatches++
			if mismatches < 5 {
				t.Logf("%q: by score %q, by rank %q", w, got, want)
			}
		}
	}
	if mismatches > 0 {
		t.Errorf("%d of %d words segment differently", mismatches, len(words))
	}
}

func runes(w string) []string {
	var syms []string
	for _, r := range w {
		syms = append(syms, string(r))
	}
	return syms
}

// spmByScore is llama.cpp's SPM merge loop: repeatedly merge the adjacent
// pair whose concatenation is the highest-scoring piece, leftmost on ties.
func spmByScore(w string, score map[string]float32) []string {
	syms := runes(w)
	for {
		best, bestScore := -1, float32(math.Inf(-1))
		for i := 0; i+1 < len(syms); i++ {
			if s, ok := score[syms[i]+syms[i+1]]; ok && s > bestScore {
				best, bestScore = i, s
			}
		}
		if best < 0 {
			return syms
		}
		syms[best] += syms[best+1]
		syms = append(syms[:best+1], syms[best+2:]...)
	}
}

// spmByRank applies the training merges in order, each left to right.
func spmByRank(w string, merges [][2]string) []string {
	syms := runes(w)
	for _, m := range merges {
		out := syms[:0]
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == m[0] && syms[i+1] == m[1] {
				out = append(out, m[0]+m[1])
				i++
			} else {
				out = append(out, syms[i])
			}
		}
		syms = out
	}
	return syms
}
