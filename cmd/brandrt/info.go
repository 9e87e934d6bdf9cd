package main

import (
	"fmt"
	"io"
	"runtime"
	"syscall"

	"github.com/klauspost/cpuid/v2"
	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
)

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:  "info",
		Usage: "print this machine, the MPI library and where the launcher placed this process",
		Description: "Useful in a batch script before a long job: run it under mpirun\n" +
			"(mpirun -np 2 brandrt info) to see what every rank sees.",
		Action: func(c *cli.Context) error {
			if err := noArgs(c, ""); err != nil {
				return err
			}
			env, err := launch.FromEnv()
			if err != nil {
				return err
			}
			printInfo(c.App.Writer, env)
			return nil
		},
	}
}

func printInfo(w io.Writer, env launch.Env) {
	cpu := cpuid.CPU
	physical := cpu.PhysicalCores
	if physical == 0 { // some hypervisors hide the topology
		physical = runtime.NumCPU()
	}
	prefix := ""
	if env.Launcher != "" {
		prefix = fmt.Sprintf("rank %d/%s: ", env.Rank, known(env.Size))
		fmt.Fprintf(w, "%slauncher  %s, local rank %d of %s\n", prefix, env.Launcher, env.LocalRank, known(env.LocalSize))
	}
	fmt.Fprintf(w, "%snode      %s\n", prefix, env.Node)
	fmt.Fprintf(w, "%scpu       %s\n", prefix, cpu.BrandName)
	fmt.Fprintf(w, "%scores     %d physical, %d logical, cache line %d B, L2 %s, L3 %s\n", prefix,
		physical, runtime.NumCPU(), cpu.CacheLine, ibytes(int64(cpu.Cache.L2)), ibytes(int64(cpu.Cache.L3)))
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		fmt.Fprintf(w, "%smemory    %s\n", prefix, ibytes(int64(si.Totalram)*int64(si.Unit)))
	}
	fmt.Fprintf(w, "%sgo        %s %s/%s\n", prefix, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "%smpi       %s\n", prefix, collectives.LibraryVersion())
}

// known writes a count the launcher may not have given (0) as "?".
func known(n int) string {
	if n == 0 {
		return "?"
	}
	return fmt.Sprint(n)
}
