package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"

	"stockpot/internal/kvtier"
	"stockpot/internal/offload"
	"stockpot/internal/tenant"
)

// tenantFlags are --tenants and --backend-key, shared by serve and route.
type tenantFlags struct {
	file, backendKey, backendKeyFile *string
}

// addTenantFlags registers them on fs. route already has --backend-key and its file (its own
// calls and forwarded requests carry it); serve takes them to verify the router's signed
// identity header.
func addTenantFlags(fs *flag.FlagSet, withBackendKey bool) tenantFlags {
	tf := tenantFlags{file: fs.String("tenants", "", "tenants file (YAML or JSON): hashed keys naming tenants, their cache namespaces, quotas and public reads; replaces --api-key")}
	if withBackendKey {
		tf.backendKey = fs.String("backend-key", "", "key shared with the router: its own calls present it, and its forwarded requests' tenant header (X-Stockpot-Tenant) is signed with it")
		tf.backendKeyFile = fs.String("backend-key-file", "", "file whose first line is the backend key")
	}
	return tf
}

// load reads the tenants file (nil without --tenants) and the backend key; a malformed file
// fails here, at start, naming its line.
func (tf tenantFlags) load(apiKeys []string) (*tenant.Set, string, error) {
	var set *tenant.Set
	if *tf.file != "" {
		if len(apiKeys) > 0 {
			return nil, "", errors.New("--tenants and --api-key are exclusive: --api-key is the single-tenant shorthand (put its key's sha256 in the tenants file instead)")
		}
		s, err := tenant.Load(*tf.file)
		if err != nil {
			return nil, "", fmt.Errorf("--tenants: %w", err)
		}
		set = s
	}
	var bk string
	if tf.backendKey != nil {
		bk = *tf.backendKey
		if *tf.backendKeyFile != "" {
			keys, err := readKeyFile(*tf.backendKeyFile)
			if err != nil || len(keys) == 0 {
				return nil, "", fmt.Errorf("--backend-key-file: %v", cmp.Or(err, errors.New("no key in the file")))
			}
			bk = keys[0]
		}
	}
	return set, bk, nil
}

// tenantTierQuotas gives each tenant's cache_bytes to the lower tiers that keep per-owner
// budgets (host and disk). Redis keeps none: a tenant's remote quota bounds nothing yet.
func tenantTierQuotas(t *offload.Tiers, set *tenant.Set) {
	for _, ten := range set.Tenants() {
		for _, k := range kvtier.Below {
			if b := ten.Quotas.CacheBytes[k]; b > 0 {
				t.SetOwnerLimit(k, ten.Owner(), b)
			}
		}
	}
}

// tenantPinOwners is engine.Config.PinOwnerBytes for the tenants file: each tenant's pins are
// capped by its device cache_bytes and guaranteed a share of the pin budget (engine pins.go).
// nil without a file: one budget, first come.
func tenantPinOwners(set *tenant.Set) []int64 {
	ts := set.Tenants()
	if len(ts) == 0 {
		return nil
	}
	out := make([]int64, len(ts))
	for _, t := range ts {
		if o := int(t.Owner()); o > 0 && o <= len(out) {
			out[o-1] = t.Quotas.CacheBytes[kvtier.Device]
		}
	}
	return out
}
