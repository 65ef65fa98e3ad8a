package router

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Zero values take the defaults; bad values are errors, never silently replaced.
func TestConfigValidate(t *testing.T) {
	got, err := Config{}.validate()
	if err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	d := DefaultConfig()
	if got.HealthInterval != d.HealthInterval || got.MaxAttempts != d.MaxAttempts || got.LoadBound != d.LoadBound || got.Policy != d.Policy {
		t.Fatalf("zero Config filled to %+v, want the defaults", got)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"health interval", func(c *Config) { c.HealthInterval = -time.Second }, "HealthInterval"},
		{"body read timeout", func(c *Config) { c.BodyReadTimeout = -1 }, "BodyReadTimeout"},
		{"max attempts", func(c *Config) { c.MaxAttempts = -1 }, "MaxAttempts"},
		{"load bound below 1", func(c *Config) { c.LoadBound = 0.5 }, "LoadBound"},
		{"load bound NaN", func(c *Config) { c.LoadBound = math.NaN() }, "LoadBound"},
		{"load penalty", func(c *Config) { c.LoadPenalty = -2 }, "LoadPenalty"},
		{"prefix tokens", func(c *Config) { c.PrefixTokens = -1 }, "PrefixTokens"},
		{"tier weight", func(c *Config) { c.TierWeights[1] = -1 }, "TierWeights"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{}
			tc.mod(&c)
			_, err := c.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate: err %v, want one naming %s", err, tc.want)
			}
			if _, err := New(c); err == nil {
				t.Fatalf("New accepted %s", tc.name)
			}
			if _, err := NewPolicy("kv-aware", c.PolicyConfig); tc.want != "HealthInterval" && tc.want != "BodyReadTimeout" && tc.want != "MaxAttempts" && err == nil {
				t.Fatalf("NewPolicy accepted %s", tc.name)
			}
		})
	}
}
