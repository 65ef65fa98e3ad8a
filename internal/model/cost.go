package model

// Work is the arithmetic of a prompt token, counted in multiply-adds: Token is what every
// token costs wherever it sits (the projections, the FFN or the experts it is routed to, a
// recurrent layer's update), Attend what it costs per earlier position it attends over (the
// attention layers' q·k and p·v; MLA's over the latent). Prefilling a token at position p
// costs Token + p·Attend. The output head is left out: a prefill computes it for the last
// token only.
type Work struct {
	Token, Attend float64
}

// Work counts c's arithmetic per token (see Work).
func (c Config) Work() Work {
	var w Work
	D := float64(c.Dim)
	for l := 0; l < c.Layers; l++ {
		switch c.Kind(l) {
		case LayerAttention:
			q := float64(c.QDim())
			if c.AttnGate {
				q *= 2 // qwen35's attn_q also yields the output gate
			}
			w.Token += D*(q+2*float64(c.KVDim())) + float64(c.QDim())*D
			w.Attend += 2 * float64(c.Heads*c.HeadDim)
		case LayerDeltaNet:
			s := c.SSM
			w.Token += D*float64(s.ConvDim()+s.ValueDim()+2*s.VHeads) + float64(s.ValueDim())*D
			w.Token += 4 * float64(s.VHeads*s.StateSize*s.StateSize)
		case LayerKDA:
			s := c.SSM
			S, inner := float64(s.StateSize), float64(c.Heads*s.StateSize)
			w.Token += 3*D*inner + D*S + S*inner + D*float64(c.Heads) + inner*D
			if c.Arch == ArchKimiK3 {
				w.Token += D * inner // the full-rank output gate
			} else {
				w.Token += D*S + S*inner
			}
			w.Token += 4 * float64(c.Heads) * S * S
		case LayerMLA:
			m, H := c.MLA, float64(c.Heads)
			if r := float64(c.K3.QLoraRank); r > 0 {
				w.Token += D*r + r*H*float64(m.KHeadDim)
			} else {
				w.Token += D * H * float64(m.KHeadDim)
			}
			r := float64(m.KVLoraRank)
			w.Token += D*float64(m.LatentDim()) + H*float64(m.NopeDim())*r + H*r*float64(m.VHeadDim) + H*float64(m.VHeadDim)*D
			if c.Arch == ArchKimiK3 {
				w.Token += D * H * float64(m.VHeadDim) // the output gate
			}
			w.Attend += H * float64(m.LatentDim()+m.KVLoraRank)
		}
		if c.MoELayer(l) {
			e := c.MoE
			W, F := float64(e.width(c.Dim)), float64(e.FFN)
			w.Token += D*float64(e.Experts) + float64(e.Used)*3*W*F + float64(e.Shared)*3*D*F
			if e.Latent > 0 {
				w.Token += 2 * D * W
			}
		} else {
			w.Token += 3 * D * float64(c.FFN)
		}
	}
	return w
}

// AttendCost is Work's Attend over its Token: the cost of attending one earlier position as a
// fraction of a token's other work, what the restore-vs-recompute cost model needs to price a
// block by its depth (offload.CostConfig.AttendCost). 0 for a model without attention.
func (c Config) AttendCost() float64 {
	w := c.Work()
	if w.Token <= 0 {
		return 0
	}
	return w.Attend / w.Token
}
