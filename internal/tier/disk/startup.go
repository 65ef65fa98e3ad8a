package disk

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Start-up drops: entries of the store's directory that Open did not index, by reason, the
// label values of stockpot_kv_disk_startup_dropped_total. The listing reads each entry's type
// from the directory itself (lstat, never stat): a link is never followed, so nothing outside
// the directory is ever read or deleted through one.
const (
	// DropEmpty: a zero-length file under a record's name (a crash between create and write
	// on a file system that does not order them). Removed.
	DropEmpty = "empty"
	// DropTruncated: a file under a record's name too short to hold a header and a trailer.
	// Removed.
	DropTruncated = "truncated"
	// DropSymlink: a symbolic link, whatever its name. Left in place, never followed: its
	// target is not ours to read or remove, and a link is not a record this store wrote.
	DropSymlink = "symlink"
	// DropNotRegular: a directory, device, socket or pipe. Left in place.
	DropNotRegular = "not_regular"
	// DropBadName: a regular file whose name is neither a record, a pin record nor a temp
	// file: something this store did not write. Removed.
	DropBadName = "bad_name"
	// DropTemp: a ".tmp-*" file, the half of a write a crash interrupted. Removed.
	DropTemp = "temp"
	// DropUnreadable: an entry whose metadata could not be read (lstat failed for another
	// reason than its removal meanwhile). Left in place.
	DropUnreadable = "unreadable"
)

// dropReasons lists every start-up drop reason, in the order the metric reports them (each
// from 0, so a dashboard's rate() has a series).
var dropReasons = []string{DropEmpty, DropTruncated, DropSymlink, DropNotRegular, DropBadName, DropTemp, DropUnreadable}

// StartupDrops returns how many directory entries Open did not index, by reason (Drop*):
// every reason is present, most with 0. Fixed once Open returns.
func (s *Store) StartupDrops() map[string]uint64 {
	out := make(map[string]uint64, len(dropReasons))
	for _, r := range dropReasons {
		out[r] = s.drops[r]
	}
	return out
}

var descStartupDropped = prometheus.NewDesc("stockpot_kv_disk_startup_dropped_total",
	"Entries of the disk tier's directory not indexed at start, by reason (empty, truncated, symlink, not_regular, bad_name, temp, unreadable); links are never followed.",
	[]string{"reason"}, nil)

// The store is a prometheus.Collector of its start-up drops: register it with the registry
// that serves /metrics (reg.Register(store)), as the remote tier's store is.
var _ prometheus.Collector = (*Store)(nil)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) { ch <- descStartupDropped }

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	for _, r := range dropReasons {
		ch <- prometheus.MustNewConstMetric(descStartupDropped, prometheus.CounterValue, float64(s.drops[r]), r)
	}
}
