package prototest

import (
	"flag"
	"testing"
)

var schedules = flag.Int("schedules", 3000, "number of randomized schedules TestRandomSchedules runs")

func TestRandomSchedules(t *testing.T) {
	n := *schedules
	if testing.Short() {
		n /= 10
	}
	for seed := uint64(0); seed < uint64(n); seed++ {
		if err := RunSchedule(seed); err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzSchedule(f *testing.F) {
	for seed := uint64(0); seed < 8; seed++ {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		if err := RunSchedule(seed); err != nil {
			t.Fatal(err)
		}
	})
}
