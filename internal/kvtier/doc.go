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
// Adding a tier touches, besides its store (a package under internal/tier
// that passes tiertest):
//   - here: a constant before count, and its name;
//   - offload/tiers.go: a Config field and its branch in Open; offload/cost.go:
//     its read-bandwidth and overhead priors;
//   - cmd/stockpot/serve.go: its flag, into offload.Config;
//   - engine/request.go: its Usage field (a case of tierTokens), and
//     api/types.go: its usage.cache field (the API contract);
//   - router/index.go: its default weight.
//
// The metric labels, the kv-events names and the engine's restore counts
// follow from the constant. Sets of tiers are uint8 bit sets (kvevents,
// router): at most 8 tiers.
//
// It imports only the standard library: every layer may import it.
package kvtier
