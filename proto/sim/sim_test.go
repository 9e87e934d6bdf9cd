package sim

import (
	"testing"

	"github.com/brandrt/brandrt/proto"
)

func TestSmallRunAllVariants(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Files, cfg.ChunkFiles = 20000, 16
	cfg.Variants, cfg.Epochs = proto.Variants, 2
	var got []Result
	if err := Run(cfg, func(r Result) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		t.Logf("%+v", r)
	}
}
