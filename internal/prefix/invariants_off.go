//go:build !invariants

package prefix

const invariants = false
