package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/rt/shm"
)

// TestPlanLikelyPeak holds plan's likely peak to its rule: the terms
// held whatever the training does, the rank's own files as the pages
// they write where the budget holds the shard (counted here from the
// dataset's files), the process, and the bounds on files in flight
// filled as the costs file says, the files handed on as full as a
// training that takes its batches as they come keeps them, or one that
// bounds the epoch (--train-rate). Without the fills there is none, and
// a fill that is not a share of a bound is refused, by name.
func TestPlanLikelyPeak(t *testing.T) {
	const process, inFlight, handed, training = 30e6, 0.4, 0.2, 0.5
	costs := `{"rank_s_per_file": 0, "rank_s_per_moved_file": 0, "rank_s_per_moved_byte": 0, "read_s_per_byte": 0,
		"rank_s_start": 0, "rank_s_per_filled_byte": 0, "client_s_per_file": 1e-6, "client_s_per_byte": 0, "cores_busy": 1, "start_s": 0`
	fills := writeTemp(t, "fills.json", 0o644, costs+fmt.Sprintf(`, "mem_process_bytes": %g, "mem_fill_in_flight": %g, "mem_fill_handed": %g, "mem_fill_handed_training": %g}`,
		process, inFlight, handed, training))
	none := writeTemp(t, "none.json", 0o644, costs+"}")
	sizes, one, two := planDatasets(t)
	var written int64 // what the files write of their places
	for _, s := range sizes {
		written += min(shm.Placed(s), (s+4095)&^4095)
	}
	for _, tc := range []struct {
		name, dir, mem, costs string
		nodes                 int
		more                  []string
		fill                  float64 // of the files handed on
	}{
		{"one rank holding its shard", one, "100%", fills, 1, nil, handed},
		{"one rank, a quarter", one, "25%", fills, 1, nil, handed},
		{"two ranks, a quarter", two, "25%", fills, 2, nil, handed},
		{"two ranks, the training bounds", two, "25%", fills, 2, []string{"--train-rate", "1"}, training},
		{"two ranks, a training faster than the rest", two, "25%", fills, 2, []string{"--train-rate", "1000000000"}, handed},
		{"no fills", two, "25%", none, 2, nil, -1},
	} {
		args := append([]string{"plan", "--chunks", tc.dir, "--nodes", fmt.Sprint(tc.nodes), "--mem", tc.mem,
			"--epochs", "2", "--cpu-costs", tc.costs, "--cores", "2"}, tc.more...)
		out, errs, status := runCLI(t, append(args, "--json")...)
		var p planned
		if status != 0 || json.Unmarshal([]byte(out), &p) != nil {
			t.Fatalf("%s: plan: status %d\n%s%s", tc.name, status, errs, out)
		}
		if tc.fill < 0 {
			if p.Peak != nil {
				t.Errorf("%s: peak_bytes %v without the fills", tc.name, p.Peak)
			}
			continue
		}
		if len(p.Peak) != tc.nodes {
			t.Fatalf("%s: peak_bytes %v, want one per rank", tc.name, p.Peak)
		}
		for r, f := range p.Terms {
			own := f.Own
			if holds := f.Budget >= f.Shard; holds != (tc.mem == "100%") {
				t.Errorf("%s, rank %d: budget %d, shard %d", tc.name, r, f.Budget, f.Shard)
			} else if holds {
				own = f.Written
				if tc.nodes == 1 && math.Abs(float64(f.Written-written)) > 1 {
					t.Errorf("%s: the files write %d bytes of their places, plan says %d", tc.name, written, f.Written)
				}
			}
			if f.Written <= 0 || f.Written > f.Own {
				t.Errorf("%s, rank %d: written %d of own %d", tc.name, r, f.Written, f.Own)
			}
			want := float64(own+f.Records+f.Tables+f.Dataset+f.Order+f.OrderOut+f.Reads+f.Rings) + process +
				inFlight*float64(f.Remote+f.MPI+f.Answered+f.Received) + tc.fill*float64(f.Handed)
			if math.Abs(float64(p.Peak[r])-want) > 1 {
				t.Errorf("%s, rank %d: likely peak %d, want %.0f (terms %+v)", tc.name, r, p.Peak[r], want, f)
			}
			if tc.nodes > 1 && (f.Remote+f.MPI+f.Answered+f.Received == 0 || f.Handed == 0) {
				t.Errorf("%s, rank %d: no bound on files in flight or handed on to fill: %+v", tc.name, r, f)
			}
			// every bound full and the footprint's process: the footprint
			// (the same terms as its total, less what no place lent twice
			// leaves unwritten)
			whole := memFills{Process: ptr(float64(f.Process)), InFlight: ptr(1.0), Handed: ptr(1.0)}
			total := f.Total()
			if f.Budget >= f.Shard {
				total -= f.Own - f.Written
			}
			if got, _ := whole.likelyPeak(f, false); got > total || got < total-4096 {
				t.Errorf("%s, rank %d: with every bound full, likely peak %d, want the footprint's %d", tc.name, r, got, total)
			}
		}
		// the table says it too: the busiest rank's
		text, errs, status := runCLI(t, args...)
		if status != 0 || !strings.Contains(text, "likely peak") {
			t.Errorf("%s: the table has no likely peak: status %d\n%s%s", tc.name, status, errs, text)
		}
	}
	bad := writeTemp(t, "bad.json", 0o644, costs+`, "mem_process_bytes": 1, "mem_fill_in_flight": 1.5}`)
	_, errs, status := runCLI(t, "plan", "--chunks", one, "--nodes", "1", "--mem", "25%", "--json", "--cpu-costs", bad, "--cores", "2")
	if status == 0 || !strings.Contains(errs, `"mem_fill_in_flight" is 1.5`) || !strings.Contains(errs, bad) {
		t.Errorf("a fill of 1.5: status %d, %q; want it refused, naming the key and the file", status, errs)
	}
}

func ptr(v float64) *float64 { return &v }
