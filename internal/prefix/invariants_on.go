//go:build invariants

package prefix

// invariants turns on CheckInvariants after every mutation (go test -tags invariants).
const invariants = true
