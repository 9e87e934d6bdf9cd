package prototest

import (
	"flag"
	"testing"
)

var schedules = flag.Int("schedules", 3000, "number of randomized schedules TestRandomSchedules runs")

func TestRandomSchedules(t *testing.T)       { runSchedules(t, RunSchedule) }
func TestRandomWindowSchedules(t *testing.T) { runSchedules(t, RunWindowSchedule) }

// runSchedules runs -schedules schedules (a tenth with -short) of run.
func runSchedules(t *testing.T, run func(seed uint64) error) {
	n := *schedules
	if testing.Short() {
		n /= 10
	}
	for seed := uint64(0); seed < uint64(n); seed++ {
		if err := run(seed); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzSchedule lets the fuzzer make every decision of a schedule, the
// first byte choosing the policy.
func FuzzSchedule(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 20, 25, 17, 4, 2, 0, 1, 5, 200, 7, 9, 1, 0, 3})
	f.Add([]byte("a longer seed steers more decisions of the schedule"))
	f.Fuzz(func(t *testing.T, data []byte) {
		window := len(data) > 0 && data[0]&1 == 1
		if len(data) > 0 {
			data = data[1:]
		}
		if err := RunScheduleBytes(data, window); err != nil {
			t.Fatal(err)
		}
	})
}
