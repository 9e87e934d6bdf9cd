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
		{func(c *Config) { c.Mem = Budget{} }, "want exactly one of them positive"},
		{func(c *Config) { c.Mem = Budget{Bytes: 1 << 30, Shard: 0.5} }, "1073741824 bytes, 0.5 of the shard, 0 of the memory cgroup: want exactly one"},
		{func(c *Config) { c.Mem = Budget{Cgroup: 1.5} }, "1.5 of the memory cgroup: want exactly one of them positive (a share ≤ 1)"},
		{func(c *Config) { c.Mem = Budget{Bytes: -1} }, "-1 bytes"},
		{func(c *Config) { c.Policy = "lru" }, `policy "lru", want window or paper`},
	} {
		cfg := DefaultConfig()
		cfg.Chunks, cfg.Mem.Shard = "x", 0.5
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}
