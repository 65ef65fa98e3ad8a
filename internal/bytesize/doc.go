// Package bytesize parses and formats byte counts written for people: "512MiB", "8GiB",
// "1.5G", "64k", "4096".
//
// It owns one noun, Size, which also implements flag.Value so a flag or an environment
// variable can carry it directly.
//
// Units, case-insensitive:
//   - none or B: bytes;
//   - KiB MiB GiB TiB PiB: powers of 1024;
//   - KB MB GB TB PB: powers of 1000 (SI, as disks are sold);
//   - K M G T P alone: powers of 1024, as docker, ulimit and most Unix tools read them.
//
// A fraction is allowed ("1.5GiB") and the result is rounded down to whole bytes.
// Negative sizes and sizes over math.MaxInt64 are errors.
package bytesize
