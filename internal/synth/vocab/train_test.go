package vocab

import (
	"testing"
	"time"
)

func TestTrainTiming(t *testing.T) {
	t0 := time.Now()
	c := Corpus()
	t.Logf("corpus %d bytes in %v", len(c), time.Since(t0))
	for _, size := range []int{1500, 4096, 8192, 16384, 32768} {
		t0 = time.Now()
		v, err := TrainBPE(BPEConfig{Pre: PreSmolLM, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bpe %d: %d tokens %d merges in %v; last %q", size, len(v.Tokens), len(v.Merges), time.Since(t0), v.Tokens[len(v.Tokens)-5:])
	}
	t0 = time.Now()
	v, err := TrainSPM(SPMConfig{Size: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spm: %d tokens in %v; %q", len(v.Tokens), time.Since(t0), v.Tokens[259:300])
}
