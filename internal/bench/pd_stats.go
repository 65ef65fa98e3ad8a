package bench

import (
	"sort"
	"time"
)

// pdSample is what the P/D client saw of one request of the mixed load: its TTFT and the
// arrival of every streamed token.
type pdSample struct {
	Kind  string        // "stream" (a steady decode) or "long" (a long prompt)
	Start time.Duration // offset from the run's start
	// TTFT is from the start (the prefill request's, when the client handed off) to the first
	// streamed token of the answer; 0 when none arrived.
	TTFT time.Duration
	// Arrivals are the offsets from Start of the chunks that carried tokens, Tokens how many
	// each carried (1 when the server does not return token ids).
	Arrivals []time.Duration
	Tokens   []int
	// PromptTokens and CompletionTokens are the answering replica's usage; TransferTokens is
	// usage.cache.transfer_tokens (the prompt tokens a decode pulled instead of computing).
	PromptTokens, CompletionTokens, TransferTokens int
	Err                                            string
}

// OK reports whether the request finished without an error and streamed a token.
func (s *pdSample) OK() bool { return s.Err == "" && len(s.Arrivals) > 0 }

// itls returns the inter-token latencies of one request in milliseconds: the gap between
// consecutive token-carrying chunks, spread evenly over the tokens of the later chunk (a chunk
// of k tokens gives k gaps of gap/k). The first chunk gives none: its wait is the TTFT.
func itls(arrivals []time.Duration, tokens []int) []float64 {
	var out []float64
	for i := 1; i < len(arrivals); i++ {
		k := 1
		if i < len(tokens) && tokens[i] > 1 {
			k = tokens[i]
		}
		gap := float64(arrivals[i]-arrivals[i-1]) / float64(time.Millisecond) / float64(k)
		for j := 0; j < k; j++ {
			out = append(out, gap)
		}
	}
	return out
}

// quantile is the q-quantile of xs (R-7, as percentile), or 0 when xs is empty. xs is not
// modified.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return percentile(s, q)
}

// SLO is the service level a request must meet to count toward goodput: its TTFT, and the
// 99th percentile of its own inter-token latencies (for a 128-token stream, all but its worst
// gap or so).
type SLO struct {
	TTFT time.Duration `json:"ttft"`
	ITL  time.Duration `json:"itl_p99"`
}

// meets reports whether s finished and met slo. A request of one token has no ITL to miss.
func (slo SLO) meets(s *pdSample) bool {
	if !s.OK() || s.TTFT > slo.TTFT {
		return false
	}
	gaps := itls(s.Arrivals, s.Tokens)
	return len(gaps) == 0 || quantile(gaps, 0.99) <= float64(slo.ITL)/float64(time.Millisecond)
}

// PDLoadStats are one topology's numbers under the mixed load, over the requests that started
// in the measured window.
type PDLoadStats struct {
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
	// TTFT over every request, and apart for the steady streams and the long prompts (ms).
	TTFT        *Percentiles `json:"ttft_ms"`
	TTFTStreams *Percentiles `json:"ttft_streams_ms"`
	TTFTLong    *Percentiles `json:"ttft_long_ms"`
	// ITL pools every inter-token gap of every request (ms); ITLStreams only the steady
	// streams'.
	ITL        *Percentiles `json:"itl_ms"`
	ITLStreams *Percentiles `json:"itl_streams_ms"`
	// Goodput is the share of requests that met the SLO (TTFT and their own ITL p99);
	// GoodputStreams and GoodputLong the share of each kind.
	Goodput        *float64 `json:"goodput"`
	GoodputStreams *float64 `json:"goodput_streams"`
	GoodputLong    *float64 `json:"goodput_long"`
	// OutputTokensPerS is the completion tokens of the measured requests over the window.
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	// TransferTokens is usage.cache.transfer_tokens summed: non-zero only where the client
	// handed off.
	TransferTokens int     `json:"transfer_tokens"`
	WindowS        float64 `json:"window_s"`
}

// pdStats summarizes samples against slo. window is the length of the run (for throughput).
func pdStats(samples []*pdSample, slo SLO, window time.Duration) PDLoadStats {
	st := PDLoadStats{Requests: len(samples), WindowS: window.Seconds()}
	var ttft, ttftS, ttftL, itl, itlS []float64
	met := map[string]int{}
	n := map[string]int{}
	out := 0
	for _, s := range samples {
		n[s.Kind]++
		if !s.OK() {
			st.Errors++
			continue
		}
		ms := float64(s.TTFT) / float64(time.Millisecond)
		ttft = append(ttft, ms)
		gaps := itls(s.Arrivals, s.Tokens)
		itl = append(itl, gaps...)
		if s.Kind == "long" {
			ttftL = append(ttftL, ms)
		} else {
			ttftS = append(ttftS, ms)
			itlS = append(itlS, gaps...)
		}
		if slo.meets(s) {
			met[s.Kind]++
		}
		out += s.CompletionTokens
		st.TransferTokens += s.TransferTokens
	}
	st.TTFT, st.TTFTStreams, st.TTFTLong = summarize(ttft), summarize(ttftS), summarize(ttftL)
	st.ITL, st.ITLStreams = summarize(itl), summarize(itlS)
	share := func(a, b int) *float64 {
		if b == 0 {
			return nil
		}
		v := float64(a) / float64(b)
		return &v
	}
	st.Goodput = share(met["stream"]+met["long"], len(samples))
	st.GoodputStreams, st.GoodputLong = share(met["stream"], n["stream"]), share(met["long"], n["long"])
	if window > 0 {
		st.OutputTokensPerS = float64(out) / window.Seconds()
	}
	return st
}
