package main

import (
	"flag"

	"stockpot/internal/pipeline"
)

// addBlendFlags registers chunk blending's serve flags on fs, writing into c (the server's
// pipeline.BlendConfig; its defaults are the flags' defaults).
func addBlendFlags(fs *flag.FlagSet, c *pipeline.BlendConfig) {
	if *c == (pipeline.BlendConfig{}) {
		*c = pipeline.DefaultBlendConfig()
	}
	fs.Float64Var(&c.Recompute, "blend-recompute", c.Recompute, "chunk blending: the fraction of chunk tokens recomputed when a request's blend names no recompute, in [0, 1] (1: bitwise a full prefill)")
	fs.IntVar(&c.MaxChunks, "blend-max-chunks", c.MaxChunks, "chunk blending: the most chunks one request may mark (token spans and marked parts together); more is a 400")
}
