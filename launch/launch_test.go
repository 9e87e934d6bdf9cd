package launch

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want Env
		err  string
	}{
		{env: nil, want: Env{Size: 1}},
		{env: map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
			want: Env{Launcher: "mpirun", Rank: 2, Size: 4}},
		{env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
			want: Env{Launcher: "slurm", Rank: 1, Size: 2, LocalRank: 1}},
		{env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "SLURM_PROCID": "7", "SLURM_NTASKS": "8"},
			want: Env{Launcher: "mpirun", Rank: 1, Size: 2}},
		{env: map[string]string{"PMI_RANK": "x", "PMI_SIZE": "2"}, err: `PMI_RANK="x" is not a number`},
		{env: map[string]string{"PMI_RANK": "3", "PMI_SIZE": "2"}, err: "rank out of range"},
	} {
		got, err := Parse(func(k string) string { return c.env[k] })
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.env, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: got %+v, %v; want %+v", c.env, got, err, c.want)
		}
	}
}
