package sim

import "github.com/brandrt/brandrt/proto"

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// mix fills res's randomness figures from this epoch's orders and, after
// the first epoch, the previous one's.
func mix(res *Result, m *proto.Mapping, cfg Config, cur, prev proto.Orders) {
	res.Mix = proto.MeasureMix(m, cfg.Batch, cfg.Labels, cur, prev)
}
