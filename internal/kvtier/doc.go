// Package kvtier names the places a K/V block can live: the device's working
// pool and the tiers below it (host RAM, local disk, a shared remote store),
// fastest first. It is the one Tier type that the engine (where a restored
// block came from), offload (which store a queue or a read belongs to),
// kvevents (the tier of a block event), the server (metric rows) and the
// router (tier weights) share, so a tier is never named by a bare string or a
// second enum.
//
// Device is 0, so an array indexed by Tier (Counts, the router's weights)
// starts with the working pool. The names ("device", "host", "disk",
// "remote") are wire values: the {tier} label of the metrics and the "tier"
// field of /v1/kv-events. Changing one breaks dashboards and routers.
//
// Adding a tier: a constant here (before count) and its name in names; every
// array indexed by Tier grows with it. Then a store (package tier) and its
// flag (cmd/stockpot, into offload.Config).
//
// It imports only the standard library: every layer may import it.
package kvtier
