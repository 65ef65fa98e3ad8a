// Package memstore is the in-memory reference tier.Store for tests: an
// unbounded map under one mutex that copies values in and out, so it is
// obviously right rather than fast.
// It is a tier.Pinner with no budget: pins expire (by its clock, NewWithClock in tests), are
// refreshed by Get and Put and listed by Pins, and never change what it keeps.
package memstore
