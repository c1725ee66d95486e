package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU time is a steadier measure of cost than throughput on a busy machine:
// the benchmark reads its own (getrusage; for SQLite that includes the
// database) and, for a container it started, the container's cgroup
// (v2) counter. A server from a DSN has no counter.

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cgroupCPU returns a function reading the CPU time of a Docker container
// from its cgroup, or nil when it cannot be read: cgroup v2 only (on a host
// with cgroup v1 the database's CPU is not reported).
func cgroupCPU(containerID string) func() time.Duration {
	if containerID == "" {
		return nil
	}
	for _, v2 := range []string{
		"/sys/fs/cgroup/system.slice/docker-" + containerID + ".scope/cpu.stat",
		"/sys/fs/cgroup/docker/" + containerID + "/cpu.stat",
		"/sys/fs/cgroup/unified/docker/" + containerID + "/cpu.stat", // hybrid: v2 beside v1
	} {
		if _, err := readUsageUsec(v2); err == nil {
			return func() time.Duration { n, _ := readUsageUsec(v2); return time.Duration(n) * time.Microsecond }
		}
	}
	return nil
}

func readUsageUsec(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, os.ErrNotExist
}
