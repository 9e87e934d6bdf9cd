package rt

import (
	"strings"
	"testing"
)

// Counts the runtime narrows are refused past what it stores: epochs are
// numbered in a uint32 (the loop needs one number past the last), and
// consumers, their depth and the I/O workers have their most.
func TestConfigBounds(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Epochs = 1 << 32 }, "4294967296 epochs, want 1 to 2147483647"},
		{func(c *Config) { c.Epochs = 1<<32 + 1 }, "4294967297 epochs, want 1 to 2147483647"},
		{func(c *Config) { c.IOWorkers = 1 << 31 }, "2147483648 I/O workers, want 1 to 1024"},
		{func(c *Config) { c.Consume = 1025 }, "1025 consumers, want 0 to 1024"},
		{func(c *Config) { c.Depth = 0 }, "depth 0, want 1 to 1024"},
	} {
		cfg := DefaultConfig()
		cfg.Chunks, cfg.MemFraction = "x", 0.5
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}
