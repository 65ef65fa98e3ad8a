package model

// StateEncodedBytes is the size of a State's AppendBinary bytes for this model: what a tier
// stores for one recurrent-state checkpoint (its header and Config.StateBytes of f32 data). 0
// for models without recurrent state.
func (c Config) StateEncodedBytes() int {
	if !c.Hybrid() {
		return 0
	}
	return len(stateMagic) + 8 + c.StateBytes()
}
