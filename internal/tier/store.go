package tier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"stockpot/internal/prefix"
)

// Key names one block in a tier: the chain root (model identity + tenant
// salt) and the block hash. The hash alone already names its root (it is
// chained from it); the root is kept so stores can namespace, list and drop
// a whole identity or tenant.
type Key struct {
	Root prefix.Hash
	Hash prefix.Hash
}

func (k Key) String() string { return k.Root.Short() + "/" + k.Hash.Short() }

// Item is one value to Put.
type Item struct {
	Key   Key
	Value []byte // an encoded Record; owned by the store after Put
	// Shadowed says a faster tier above this one holds the same value (the host tier, which
	// every write-back reaches first). A store with a byte budget makes room for a shadowed
	// item only by evicting other shadowed items, never one it alone holds; an item it cannot
	// place that way is declined (counted in Stats.Declined, not an error). Stores without a
	// budget of their own ignore it. See the package doc, "Sole copies".
	Shadowed bool
	// PinTTL, when > 0, stores the item pinned (see Pinner): kept ahead of every unpinned item
	// until PinTTL after its last use. Stores that are not Pinners ignore it. A Put with
	// PinTTL 0 over a pinned item keeps the pin (a write-back is a use: it refreshes the
	// expiry); only Pin with ttl <= 0 unpins.
	PinTTL time.Duration
	// Owner is the tag of the tenant whose request committed the block (tenant.Tenant.Owner;
	// 0: none), for stores with per-owner budgets (OwnerLimiter). Others ignore it.
	Owner uint16
}

// OwnerLimiter is the optional ability of a store with a byte budget to keep one per owner
// (a tenant's cache_bytes for its tier): while an owner holds more than its limit, making room
// evicts that owner's items first. A priority, not a wall: its items are still stored.
type OwnerLimiter interface {
	SetOwnerLimit(owner uint16, bytes int64) // bytes <= 0: no limit
}

// Stats is a snapshot of a store's counters. Capacity is 0 when the store has
// no byte budget of its own (memstore); Redis reports its server's maxmemory, and its
// UsedBytes and Items as measured from Redis, not counted (see package redis).
type Stats struct {
	UsedBytes     int64
	CapacityBytes int64
	Items         int64
	Evictions     uint64 // items dropped to make room (not Deletes)
	Hits          uint64 // keys found by Get
	Misses        uint64 // keys not found by Get
	Declined      uint64 // items Put did not store (no room without evicting a sole copy or a pin)
	// PinnedItems and PinnedBytes count the unexpired pins of a Pinner (bytes as UsedBytes
	// counts them; 0 for a store that does not track its bytes, such as Redis).
	PinnedItems int64
	PinnedBytes int64
}

// Store is one offload tier. All methods are safe for concurrent use and take
// batches; results are in the order of the keys.
type Store interface {
	// Get returns one value per key, nil for a miss. Values are read-only and untrusted: a
	// store may return a value that fails decoding for an item it found damaged, so that the
	// reader counts the discard; readers verify every value (tier.DecodeVerify).
	// An error means the whole batch failed (for example the tier is down);
	// the caller treats every key as a miss.
	Get(ctx context.Context, keys []Key) ([][]byte, error)
	// Put stores items, replacing values under the same key. A store with a
	// budget evicts to make room (for a Shadowed item, only other shadowed
	// items; one that does not fit so is declined, without an error); an item
	// larger than the whole budget is refused with ErrTooLarge (the others are
	// still stored). Each failed item adds one error to the joined result.
	Put(ctx context.Context, items []Item) error
	// Delete removes keys; missing keys are not an error.
	Delete(ctx context.Context, keys []Key) error
	// Contains reports, per key, whether Get would likely find it (a tier
	// may still lose it before the Get).
	Contains(ctx context.Context, keys []Key) ([]bool, error)
	// Stats returns the store's counters.
	Stats() Stats
}

// Spiller is a store that reports what it evicts (the host tier): an item it drops may be the
// last copy above the disk, so the writer hands it to the tiers below (Unshadower) at once.
type Spiller interface {
	// SpillTo registers fn, called with the items each Put evicted, after the Put and outside
	// the store's lock. The values are the stored bytes: read-only, as values from Get.
	SpillTo(fn func([]Item))
}

// Unshadower is a store that protects the items it alone holds (see Item.Shadowed).
type Unshadower interface {
	// Unshadow marks the keys it holds as sole copies (a faster tier has dropped them) and
	// reports, per key, whether it held it; the caller Puts the ones it did not.
	Unshadow(ctx context.Context, keys []Key) ([]bool, error)
}

// Pinner is a store that honours pins (prompt-cache retention: Anthropic cache_control TTLs,
// OpenAI prompt_cache_retention). Its eviction skips a pinned item until the pin expires; a Get
// that finds a pinned item refreshes its expiry to now + its TTL; expiry is checked lazily (on
// eviction and Get) and by a periodic sweep; a persistent store keeps pins, with their remaining
// time, across a restart. Unpinned items behave exactly as in a plain Store. When only pinned
// items are left, a Put that needs room is declined (Stats.Declined), never an eviction of a pin.
type Pinner interface {
	// Pin pins the keys the store holds for ttl from now (ttl <= 0 unpins) and reports, per key,
	// whether it held it. The caller Puts (with Item.PinTTL) the ones it did not.
	Pin(ctx context.Context, keys []Key, ttl time.Duration) ([]bool, error)
	// Pins lists the pinned items that have not expired.
	Pins() []PinInfo
}

// PinInfo is one pinned item.
type PinInfo struct {
	Key     Key
	TTL     time.Duration // refreshed to Expires = last use + TTL
	Expires time.Time
}

var (
	// ErrTooLarge is returned (wrapped) by Put for a value over the budget.
	ErrTooLarge = errors.New("tier: value larger than the store's budget")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("tier: store closed")
	// ErrNoSpace is wrapped by a Put that failed because the tier's storage is full (a disk
	// smaller than its budget: ENOSPC), even after evicting to make room.
	ErrNoSpace = errors.New("tier: no space left")
	// ErrUnavailable is returned by a tier that is skipped for now (a remote
	// tier whose circuit breaker is open).
	ErrUnavailable = errors.New("tier: unavailable")
)

// TooLarge returns an error wrapping ErrTooLarge for key k.
func TooLarge(k Key, size, budget int64) error {
	return fmt.Errorf("%w: %s is %d bytes, budget %d", ErrTooLarge, k, size, budget)
}
