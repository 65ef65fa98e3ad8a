package tenant

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestQuotaScript steps Bucket and Limiter through testdata/quota.txt with a scripted clock.
func TestQuotaScript(t *testing.T) {
	var (
		b    *Bucket
		l    *Limiter
		ten  *Tenant
		base = time.Unix(1_000_000, 0)
	)
	at := func(d *datadriven.TestData) time.Time {
		var s string
		d.ScanArgs(t, "at", &s)
		if s == "0" {
			return base
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.Fatalf(t, "at=%s: %v", s, err)
		}
		return base.Add(dur)
	}
	floatArg := func(d *datadriven.TestData, key string) float64 {
		if !d.HasArg(key) {
			return 0
		}
		var s string
		d.ScanArgs(t, key, &s)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			d.Fatalf(t, "%s=%s: %v", key, s, err)
		}
		return f
	}
	datadriven.RunTest(t, "testdata/quota.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "bucket":
			b = NewBucket(floatArg(d, "rate"), int(floatArg(d, "burst")))
			return ""
		case "take":
			now := at(d)
			ok, wait := b.Take(now)
			if !ok {
				return fmt.Sprintf("refused retry-after=%v", wait)
			}
			return fmt.Sprintf("ok tokens=%g", b.Tokens(now))
		case "tenant":
			ten = &Tenant{Name: "t", Quotas: Quotas{RequestsPerSecond: floatArg(d, "rps"), Burst: int(floatArg(d, "burst")),
				Concurrent: int(floatArg(d, "concurrent"))}}
			l = NewLimiter()
			return ""
		case "acquire":
			br, ok := l.Acquire(ten, at(d))
			if !ok {
				return fmt.Sprintf("refused %s retry-after=%v", br.Quota, br.RetryAfter)
			}
			return fmt.Sprintf("admitted running=%d", l.Running(ten))
		case "release":
			l.Release(ten)
			return fmt.Sprintf("running=%d", l.Running(ten))
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	l := NewLimiter()
	ten := &Tenant{Quotas: Quotas{Concurrent: 1}}
	defer func() {
		if recover() == nil {
			t.Fatal("Release without Acquire did not panic")
		}
	}()
	l.Release(ten)
}
