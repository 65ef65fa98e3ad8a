// Package memstore is the in-memory reference tier.Store for tests: an
// unbounded map under one mutex that copies values in and out, so it is
// obviously right rather than fast.
package memstore
